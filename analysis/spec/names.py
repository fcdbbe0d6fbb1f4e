"""The characters a name may have where it becomes a file name, a ROOT key or a datacard token.

Pure Python (no JAX, no pydantic): the config loader (:mod:`analysis.config.names`) and
the reader of an earlier run's results (:mod:`analysis.likelihood.section`) apply the
same rule.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORBIDDEN", "MAX_NAME_BYTES", "NAME_RULE", "RESERVED_DATASETS", "name_problem",
           "reserved_systematic"]

#: Dataset names that Combine's datacard reserves (the observed data).
RESERVED_DATASETS = ("data_obs",)
#: Longest name in UTF-8 bytes: a file name holds 255 (``templates_`` + name + ``.png``).
MAX_NAME_BYTES = 200
#: Characters never allowed: path and ROOT-key separators (``/``, ``\\``, ``:``, ``;``
#: the cycle), the datacard's ``$`` (``$PROCESS``) and ``#`` (a comment).
FORBIDDEN = "/\\:;$#"
NAME_RULE = (f"printable characters other than whitespace and {' '.join(FORBIDDEN)}, not "
             f"starting with '.' or '-', at most {MAX_NAME_BYTES} bytes (UTF-8)")


def _allowed(c: str) -> bool:
    return c.isprintable() and not c.isspace() and c not in FORBIDDEN


def name_problem(name: Any) -> str | None:
    """Why ``name`` breaks :data:`NAME_RULE` (``" is not allowed: ..."``), or None if it
    follows it. Any language's letters are allowed (``日本語データ``, ``tt̄→ℓℓ``)."""
    size = len(name.encode("utf-8", "surrogatepass")) if isinstance(name, str) else 0
    if (isinstance(name, str) and name and 0 < size <= MAX_NAME_BYTES
            and name[0] not in ".-" and all(_allowed(c) for c in name)):
        return None
    big = f" ({size} bytes)" if size > MAX_NAME_BYTES else ""
    return (f"{big} is not allowed: it becomes a file name, a ROOT key and a datacard "
            f"token; expected {NAME_RULE}")


def reserved_systematic(name: str) -> bool:
    """Whether a systematic ``name`` is pyhf's parameter of interest ``mu`` or an
    MC-statistics modifier ``staterror_*`` of the export."""
    return name == "mu" or name.startswith("staterror_")
