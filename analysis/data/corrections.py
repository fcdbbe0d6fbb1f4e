"""correctionlib corrections, loaded once per process (file, key) and kept.

A coffea worker evaluates the per-object scale factors of every chunk it reads
(:func:`analysis.data.columns.extract_columns`); the JSON file is parsed on the first
chunk only.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

__all__ = ["correction"]


@lru_cache(maxsize=32)
def correction(path: str, key: str) -> Any:
    """The correction ``key`` of the correctionlib JSON file ``path`` (cached)."""
    import correctionlib

    return correctionlib.CorrectionSet.from_file(path)[key]
