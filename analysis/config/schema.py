"""The pydantic base of every config model, and its one-line error helpers.

Shared by :mod:`analysis.config.loader` and the objective terms of :mod:`analysis.config.terms`
(which the config's discriminated union is built from), so that both report
problems the same way: ``_fail(where, msg)`` raises a validation error that
:func:`analysis.config.loader.config_from_dict` prints as ``"{path}: {location}: {msg}"``.
"""

from __future__ import annotations

import difflib
import typing
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
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            fields = cls.model_fields
            for key, value in data.items():
                if key not in fields:
                    raise _fail(str(key), "unknown key" + _suggest(str(key), list(fields)))
                where = _bool_for_number(value, fields[key].annotation)
                if where is not None:
                    raise _fail(
                        f"{key}{where}", f"expected a number, got {str(value).lower()}"
                        if where == "" else "expected a number, got a boolean"
                    )
        return data


def _bool_for_number(value: Any, annotation: Any) -> str | None:
    """Where (``""`` or ``".i"``) a YAML boolean stands for a number in ``value`` of a
    field of type ``annotation``, else ``None``: pydantic would take ``true`` as 1, and a
    boolean is never meant as a count, a bound or a size."""
    if not _numbers_only(annotation):
        return None
    if isinstance(value, bool):
        return ""
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if isinstance(v, bool):
                return f".{i}"
    return None


def _numbers_only(annotation: Any) -> bool:
    """Whether ``annotation`` holds numbers (int/float, optional, or tuples/lists of them)
    and no ``bool``."""
    if annotation in (int, float):
        return True
    args = [a for a in typing.get_args(annotation) if a is not type(None) and a is not Ellipsis]
    if not args or bool in args:
        return False
    return all(_numbers_only(a) for a in args)


ConfigModel = _Model
