"""The pydantic base of every config model, and its one-line error helpers.

Shared by :mod:`analysis.config.loader` and the objective terms of :mod:`analysis.config.terms`
(which the config's discriminated union is built from), so that both report
problems the same way: ``_fail(where, msg)`` raises a validation error that
:func:`analysis.config.loader.config_from_dict` prints as ``"{path}: {location}: {msg}"``.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

__all__ = ["ERROR_TYPE", "ConfigModel"]

_ERR = ERROR_TYPE = "diffcoffea"  # pydantic error type of our own checks; ctx: msg, where


def _fail(where: str, msg: str) -> PydanticCustomError:
    """Build a validation error at sub-location ``where`` (dotted, relative to the model)."""
    return PydanticCustomError(_ERR, "{msg}", {"msg": msg, "where": where})


def _suggest(word: str, choices: list[str], what: str = "allowed keys") -> str:
    """Return "; did you mean 'x'?" or "; <what>: a, b, c" for a misspelt ``word``."""
    close = difflib.get_close_matches(word, choices, n=1)
    if close:
        return f"; did you mean '{close[0]}'?"
    return f"; {what}: {', '.join(choices) or '(none)'}"


class _Model(BaseModel):
    """Base for all config models: unknown keys are errors, with a spelling suggestion."""

    # allow_inf_nan=False: NaN/inf in any float field (YAML .nan, .inf) is an error
    # naming the key, never a value that poisons every result downstream.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            fields = list(cls.model_fields)
            for key in data:
                if key not in fields:
                    raise _fail(str(key), "unknown key" + _suggest(str(key), fields))
        return data


ConfigModel = _Model
