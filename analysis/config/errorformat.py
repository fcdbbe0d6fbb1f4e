"""One pydantic validation error as one line: ``"dotted.location: message"``.

:func:`_format_error` names the config's own keys (not pydantic's union members or list
forms) and says what was expected and what was found. Used by
:func:`analysis.config.loader.config_from_dict`; split out of
:mod:`analysis.config.loader`, which re-exports every name.
"""

from __future__ import annotations

from typing import Any

from analysis.config.schema import _ERR
from analysis.config.terms import TERM_TYPES
from analysis.config.yamlsafe import show_value as _show

__all__ = ["format_errors"]


_TYPE_NAMES = {
    "int": "an integer", "float": "a number", "bool": "true or false", "string": "a string",
    "list": "a list", "tuple": "a list", "dict": "a mapping", "model": "a mapping",
    "finite": "a finite number",
}
_MEMBERS = ("str", "list[str]")  # pydantic's names of a str | list[str] union's members
_LIMITS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
           "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


def _format_error(err: Any) -> str:
    """Turn one pydantic error dict into ``"dotted.location: message"``."""
    typ, ctx = err["type"], err.get("ctx") or {}
    loc = [str(part) for part in err["loc"]]
    # pydantic names the member of a discriminated union in the location
    # (objective.terms.0.target.stat): the config has no such key, drop it.
    loc = [p for i, p in enumerate(loc) if not (i >= 2 and loc[i - 2] == "terms" and p in TERM_TYPES)]
    if len(loc) >= 2 and loc[:2] == ["selection", "entries"]:  # the list form
        del loc[1]
    if loc and loc[-1] == "[key]":  # a non-string mapping key, e.g. a parameter named 1
        loc.pop()
    # ... and the member of a plain union (count: str | list[str]): selection.0.count.str
    loc = [p for i, p in enumerate(loc) if not (i and loc[i - 1] == "count" and p in _MEMBERS)]
    got = _show(err.get("input"))
    if typ == _ERR:
        loc += [p for p in ctx["where"].split(".") if p]
        msg = ctx["msg"]
    elif typ in ("value_error", "assertion_error"):
        msg = str(ctx.get("error", err["msg"]))
    elif typ == "missing":
        msg = "missing required key"
    elif typ in ("union_tag_invalid", "union_tag_not_found"):
        loc.append(str(ctx.get("discriminator", "type")).strip("'"))
        if typ == "union_tag_not_found":
            msg = "missing required key"
        else:
            msg = f"expected one of {ctx['expected_tags']}, got {_show(ctx['tag'])}"
    elif typ == "literal_error":
        msg = f"expected one of {ctx['expected']}, got {got}"
    elif typ in _LIMITS:
        key, op = _LIMITS[typ]
        msg = f"must be {op} {ctx[key]}, got {got}"
    elif typ == "too_short":
        msg = "must not be empty"
    else:
        kind = next((v for k, v in _TYPE_NAMES.items() if typ.startswith(k + "_")), None)
        msg = f"expected {kind}, got {got}" if kind else err["msg"]
    where = ".".join(loc) or "(top level)"
    return f"{where}: {msg}".replace("\n", " ")


def format_errors(errors: list[Any]) -> list[str]:
    """pydantic's errors as lines (:func:`_format_error`), each once; the members of a
    union that refused one value are one line (``selection.0.count: expected a string or
    a list, got -1``), or, where the value has one member's shape (a list), that
    member's lines alone (``selection.0.count.0: expected a string, got 1``).

    Parameters
    ----------
    errors : list of dict
        ``ValidationError.errors()``.

    Returns
    -------
    list of str
        The lines, in pydantic's order.
    """
    def member(loc: tuple) -> int | None:  # where the union's member stands in loc
        return next((i for i in range(1, len(loc)) if loc[i - 1] == "count"
                     and loc[i] in _MEMBERS), None)

    inside = {tuple(e["loc"][:i]) for e in errors
              if (i := member(tuple(e["loc"]))) is not None and len(e["loc"]) > i + 1}
    errors = [e for e in errors if (i := member(tuple(e["loc"]))) is None
              or len(e["loc"]) > i + 1 or tuple(e["loc"][:i]) not in inside]
    lines = list(dict.fromkeys(_format_error(e) for e in errors))
    out: list[str] = []
    for line in lines:
        where, _, what = line.partition(": expected ")
        kind, sep, got = what.rpartition(", got ")
        prev = out[-1] if out else ""
        if sep and prev.startswith(f"{where}: expected ") and prev.endswith(f", got {got}"):
            out[-1] = f"{prev[: -len(f', got {got}')]} or {kind}, got {got}"
        else:
            out.append(line)
    return out
