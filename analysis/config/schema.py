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

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

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

    @model_validator(mode="wrap")
    @classmethod
    def _no_unknown_keys(cls, data: Any, handler: Any) -> Any:
        if not isinstance(data, dict):
            return handler(data)
        fields = cls.model_fields
        unknown = [key for key in data if key not in fields]
        for key, value in data.items():
            if key in unknown:
                continue
            where = _bool_for_number(value, fields[key].annotation)
            if where is not None:
                raise _fail(
                    f"{key}{where}", f"expected a number, got {str(value).lower()}"
                    if where == "" else "expected a number, got a boolean"
                )
        if not unknown:
            return handler(data)
        # An unknown key (a typo) must not hide the file's other mistakes: validate the
        # known keys too and report every problem of this mapping together.
        errors = [InitErrorDetails(type=_fail(str(key), "unknown key" + _suggest(
            str(key), list(fields))), loc=(), input=data[key]) for key in unknown]
        # (a misspelt required key is missing too: said once, by its suggestion)
        meant = {c for key in unknown for c in difflib.get_close_matches(str(key), list(fields), n=1)}
        try:
            handler({k: v for k, v in data.items() if k not in unknown})
        except ValidationError as exc:
            errors += _details(exc, meant)
        raise ValidationError.from_exception_data(cls.__name__, errors)


def _details(exc: ValidationError, meant: set[str]) -> list[InitErrorDetails]:
    """``exc``'s errors as details to raise again, less a missing key in ``meant`` (none
    if one cannot be rebuilt)."""
    out = []
    for err in exc.errors(include_url=False):
        if err["type"] == "missing" and tuple(err["loc"]) in {(m,) for m in meant}:
            continue
        ctx = err.get("ctx") or {}
        typ = PydanticCustomError(_ERR, "{msg}", ctx) if err["type"] == _ERR else err["type"]
        detail = InitErrorDetails(type=typ, loc=err["loc"], input=err["input"])
        if ctx and err["type"] != _ERR:
            detail["ctx"] = ctx
        out.append(detail)
    try:  # a type pydantic cannot rebuild: the unknown keys alone, as before
        ValidationError.from_exception_data("check", out)
    except Exception:  # noqa: BLE001 - any failure to rebuild means: leave them out
        return []
    return out


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
