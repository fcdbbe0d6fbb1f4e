"""Config schema of the observables: expressions, their statistics and histograms.

Pydantic v2 models :class:`ObservableConfig` (``x``, optional ``y``, statistics named
in :mod:`analysis.spec.statistics`) and :class:`HistConfig` of
:class:`analysis.config.loader.Config`. Split out of :mod:`analysis.config.loader`,
which re-exports every name.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from analysis.config.schema import _fail, _Model
from analysis.config.yamlsafe import show_value as _show
from analysis.select import exprs
from analysis.spec import statistics as registry

__all__ = ["HistConfig", "ObservableConfig"]

_EXPR = re.compile(r"^(?:(sum|count|abs)\()?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?\)?$")


class HistConfig(_Model):
    """Binning of an observable's histogram in the optimisation plots."""

    bins: int = Field(default=40, ge=1)
    range: tuple[float, float]

    @model_validator(mode="after")
    def _check(self) -> HistConfig:
        if not self.range[0] < self.range[1]:
            raise _fail("range", f"expected [low, high] with low < high, got {list(self.range)}")
        return self


class ObservableConfig(_Model):
    """Statistics of one expression ``x`` (and optionally a second ``y``)."""

    name: str
    x: str
    y: str | None = None
    stats: list[str] = Field(min_length=1)
    hist: HistConfig | None = None
    #: unit of ``x`` for plots (default: from the name or field, e.g. GeV for pt, ht)
    unit: str | None = None

    @field_validator("stats")
    @classmethod
    def _stats(cls, v: list[str]) -> list[str]:
        # Names from the one registry (analysis.spec.statistics), read now: never a copy.
        known = [repr(n) for n in registry.names()]
        for i, name in enumerate(v):
            if name not in registry.STATISTICS:
                expected = ", ".join(known[:-1]) + f" or {known[-1]}"
                raise _fail(str(i), f"expected one of {expected}, got {_show(name)}")
        return v

    @field_validator("x", "y")
    @classmethod
    def _expr(cls, v: str | None) -> str | None:
        if v is not None and not (_EXPR.match(v) and v.count("(") == v.count(")")):
            try:
                exprs.parse(v)  # the object-set grammar (checked against sets by Config)
                return v
            except ValueError as err:
                if any(c in v for c in "[+,") or str(err).startswith("unknown function"):
                    raise ValueError(str(err)) from None
            raise ValueError(
                f"invalid expression '{v}'; expected e.g. Jet.pt, abs(Jet.eta), "
                "sum(Jet.pt), count(Jet), MET.pt"
            )
        return v

    @model_validator(mode="after")
    def _check(self) -> ObservableConfig:
        pair = [s for s in self.stats if registry.STATISTICS[s].arity == 2]
        if pair and self.y is None:
            raise _fail("stats", f"{', '.join(pair)} need a second expression 'y'")
        return self
