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

__all__: list[str] = []


_TYPE_NAMES = {
    "int": "an integer", "float": "a number", "bool": "true or false", "string": "a string",
    "list": "a list", "tuple": "a list", "dict": "a mapping", "model": "a mapping",
    "finite": "a finite number",
}
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
