"""Strict JSON out: what results.json, scan.json and the exports are written with.

Its own module so that :mod:`analysis.cli.export` and :mod:`analysis.cli.commands` both
import it and not each other.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["json_safe", "write_json"]


def json_safe(data: Any) -> Any:
    """``data`` as strict JSON values: NaN and +-inf become None (null), numpy becomes Python."""
    import numpy as np  # here: a refused config never loads numpy (docs/explanation/performance.md)

    if isinstance(data, dict):
        return {str(k): json_safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(v) for v in data]
    if isinstance(data, np.ndarray):
        return json_safe(data.tolist())
    if isinstance(data, np.generic):
        data = data.item()
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data


def write_json(path: Path, data: Any) -> None:
    """Write strict JSON atomically (temp file, then rename); NaN/inf are written as null."""
    from analysis.data.atomic import write_atomic

    text = json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n"
    write_atomic(path, text, what="results")  # one line naming the path on a full disk
