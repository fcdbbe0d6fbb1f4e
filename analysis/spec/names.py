"""The characters a name may have where it becomes a file name, a ROOT key or a datacard token.

Pure Python (no JAX, no pydantic): the config loader (:mod:`analysis.config.names`) and
the reader of an earlier run's results (:mod:`analysis.likelihood.section`) apply the
same rule.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_NAME_CHARS", "NAME_RULE", "RESERVED_DATASETS", "name_problem", "reserved_systematic"]

#: Longest name: a file name holds 255 bytes (``templates_`` + name + ``.png`` fits).
MAX_NAME_CHARS = 100
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
#: Dataset names that Combine's datacard reserves (the observed data).
RESERVED_DATASETS = ("data_obs",)
NAME_RULE = (f"letters, digits, '_', '.', '-' (not first), at most {MAX_NAME_CHARS} "
             "characters")


def name_problem(name: Any) -> str | None:
    """Why ``name`` breaks :data:`NAME_RULE` (``"expected ..."``), or None if it follows it."""
    if isinstance(name, str) and len(name) <= MAX_NAME_CHARS and _NAME.fullmatch(name):
        return None
    size = (f" ({len(name)} characters)" if isinstance(name, str)
            and len(name) > MAX_NAME_CHARS else "")
    return f"{size} is not allowed: it becomes a file name, a ROOT key and a datacard " \
           f"token; expected {NAME_RULE}"


def reserved_systematic(name: str) -> bool:
    """Whether a systematic ``name`` is pyhf's parameter of interest ``mu`` or an
    MC-statistics modifier ``staterror_*`` of the export."""
    return name == "mu" or name.startswith("staterror_")
