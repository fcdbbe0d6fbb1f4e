"""The threshold keys of a cut, from its kind (:mod:`analysis.select.cuts`).

A cut's ``op`` names its kind; the kind's ``bounds`` name its thresholds. The first,
unnamed one (``""``) is written ``value:`` or ``param:``; a named one ``b`` is written
``b:`` (a constant) or ``b_param:`` (a parameter), e.g. the window's ``lo``/``lo_param``
and ``hi``/``hi_param``. :class:`CutKeys` is the pydantic base of every config model of
a cut (object cuts, event cuts, the entries of a ``selection`` list): it accepts
exactly the keys the kind declares, checks one of each pair is given, and hands the
thresholds on in the kind's order (:meth:`CutKeys.thresholds`). A new kind needs no
change here.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import model_serializer, model_validator

from analysis.config.schema import _fail, _Model, _suggest
from analysis.select import cuts

__all__ = ["COUNT_OPS", "CutKeys"]

COUNT_OPS = (">", ">=", "<", "<=", "==")


def _names(kind: cuts.CutKind | None) -> tuple[str, ...]:
    return kind.bounds if kind is not None else ("",)


def _keys(bound: str) -> tuple[str, str]:
    """``(constant key, parameter key)`` of a threshold named ``bound``."""
    return ("value", "param") if bound == "" else (bound, f"{bound}_param")


def _kind(data: Any) -> cuts.CutKind | None:
    op = data.get("op") if isinstance(data, dict) else getattr(data, "op", None)
    return next((k for k in cuts.KINDS if isinstance(op, str) and op in k.ops), None)


class CutKeys(_Model):
    """``param``/``value`` and the named thresholds of the cut's kind (module docstring)."""

    param: str | None = None
    value: float | None = None
    limits: dict[str, Any] = {}  # the named thresholds' keys as written (lo, hi_param)

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        kind = _kind(data)
        # An op of no kind is reported by the op's own check: accept every kind's keys.
        bounds = _names(kind) if kind is not None or data.get("op") in COUNT_OPS else tuple(
            b for k in cuts.KINDS for b in k.bounds)
        named = list(dict.fromkeys(k for b in bounds if b for k in _keys(b)))
        limits = {}
        for key in named:
            if key not in data:
                continue
            v = data.pop(key)
            if key.endswith("_param"):
                if not isinstance(v, str):
                    raise _fail(key, f"expected a parameter name, got {v!r}")
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise _fail(key, f"expected a finite number, got {v!r}")
            limits[key] = v if key.endswith("_param") else float(v)
        fields = [f for f in cls.model_fields if f != "limits"]
        for key in data:
            if key not in fields:
                raise _fail(str(key), "unknown key" + _suggest(str(key), fields + named))
        data["limits"] = limits
        return data

    @model_validator(mode="after")
    def _thresholds(self) -> CutKeys:
        kind = _kind(self)
        count = getattr(self, "count", None) is not None
        if count and getattr(self, "op", None) not in COUNT_OPS:
            raise _fail("op", f"a count takes one of {', '.join(COUNT_OPS)}, got "
                        f"'{getattr(self, 'op', None)}'")
        bounds = _names(kind if not count else None)
        if "" not in bounds:
            for key in ("value", "param"):
                if getattr(self, key) is not None:
                    want = " and ".join(f"'{b}' or '{b}_param'" for b in bounds)
                    raise _fail(key, f"a '{self.op}' cut takes {want}, not '{key}'")
        for b in bounds:
            first, second = _keys(b)[::-1] if b == "" else _keys(b)  # param/value, lo/lo_param
            given = [self._get(first) is not None, self._get(second) is not None]
            if all(given):
                raise _fail(second, f"give either '{first}' or '{second}', not both")
            if not any(given):
                raise _fail("", f"needs one of '{first}' or '{second}'")
        if kind is not None and not count:
            msg = kind.check(self.op, [v for _, v in self.thresholds()])
            if msg is not None:
                raise _fail(_keys(bounds[-1])[0], msg)
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        # Dumped as written (lo: 20, not limits: {lo: 20}): a dump is a valid config, and
        # the dump (a checkpoint's fingerprint) of a cut without named thresholds is
        # what it was before kinds.
        data = handler(self)
        if isinstance(data, dict):
            data.update(data.pop("limits", None) or {})
        return data

    def _get(self, key: str) -> Any:
        return getattr(self, key) if key in ("value", "param") else self.limits.get(key)

    def threshold_keys(self) -> tuple[tuple[str, str], ...]:
        """``(constant key, parameter key)`` of each threshold, in the kind's order."""
        count = getattr(self, "count", None) is not None
        return tuple(_keys(b) for b in _names(None if count else _kind(self)))

    def thresholds(self) -> tuple[tuple[str | None, float | None], ...]:
        """``(parameter name, constant)`` of each threshold (one of the two set), in the
        order of the kind's ``bounds``."""
        return tuple((self._get(par), self._get(const)) for const, par in self.threshold_keys())
