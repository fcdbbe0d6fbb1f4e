"""The one registry of statistics: name, arity, function of a state, JSON fields.

Everything that lists statistics is derived from :data:`STATISTICS`: the config's
``observables[].stats`` choices (:data:`analysis.config.loader.Stat`), the plan's split into
statistics of one variable (of a :class:`~analysis.stats.Moments` state) and of two
(of a :class:`~analysis.stats.CoMoments` state), the statistics computed from merged
states (:func:`observable_statistics`), the objective's ``target`` paths
(:func:`json_paths`), the reports and the tests.

Every consumer reads :data:`STATISTICS` when it runs (never a copy taken at import),
so the dict is the one place a statistic is registered. Each statistic declares the
moment ``order`` its value needs (mean 1, variance 2, skewness 3, kurtosis 4): the plan
asks the kernels for that order (:func:`moment_order`), so a new statistic of order 3
gets its third moments instead of NaN.

Pure Python at import (no JAX): the config checks a statistic's name and arity
without loading JAX; the shipped statistics load :mod:`analysis.stats._statefns` when
first computed. This module is the registry's one name (``analysis.stats.registry``,
its former alias, is gone: one name for one thing). No files, no config, no coffea. Adding a statistic is one
:class:`Statistic` entry here (see the README's "Extending" section), e.g.::

    Statistic("cv", 1, lambda s: safe_div(state_std(s), state_mean(s)),
              order=2, doc="coefficient of variation std / mean")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


def _statefn(name: str) -> Callable[[Any], Any]:
    """``analysis.stats._statefns.<name>``, imported when first called (JAX loads then)."""

    def of_state(state: Any) -> Any:
        from analysis.stats import _statefns

        return getattr(_statefns, name)(state)

    of_state.__name__ = of_state.__qualname__ = name
    return of_state

__all__ = [
    "BIVARIATE",
    "NAMES",
    "STATISTICS",
    "UNIVARIATE",
    "Statistic",
    "bivariate",
    "json_paths",
    "moment_order",
    "names",
    "observable_statistics",
    "univariate",
]


@dataclass(frozen=True)
class Statistic:
    """One statistic of an observable.

    ``arity`` 1: a function of the :class:`~analysis.stats.Moments` state of ``x``;
    ``arity`` 2: of the :class:`~analysis.stats.CoMoments` state of ``(x, y)``.
    ``of_state`` is a pure JAX function (float64; NaN with zero gradient where
    undefined, e.g. for an empty selection). ``fields`` is empty for a single value,
    else the keys of the dict ``of_state`` returns (each a JSON entry of its own).
    ``order`` (keyword, required): the highest centred moment ``M_k`` of the state that
    ``of_state`` reads (1 for the mean, 4 for the kurtosis; 2 for the co-moment
    statistics); the kernels compute the moments up to it and leave higher ones NaN.
    """

    name: str
    arity: int
    of_state: Callable[[Any], Any]
    fields: tuple[str, ...] = ()
    doc: str = ""
    order: int = field(kw_only=True)

    @property
    def state(self) -> str:
        """The state it is computed from: ``"moments"`` or ``"comoments"``."""
        return "moments" if self.arity == 1 else "comoments"


STATISTICS: dict[str, Statistic] = {
    s.name: s
    for s in (
        Statistic("mean", 1, _statefn("state_mean"), order=1, doc="weighted mean"),
        Statistic("var", 1, _statefn("state_var"), order=2, doc="weighted population variance"),
        Statistic("std", 1, _statefn("state_std"), order=2, doc="square root of var"),
        Statistic("skew", 1, _statefn("state_skew"), order=3, doc="m3 / m2^(3/2)"),
        Statistic("kurtosis", 1, _statefn("state_kurtosis"), order=4, doc="m4 / m2^2 - 3 (excess)"),
        Statistic("covar", 2, _statefn("state_covar"), order=2, doc="weighted covariance of x and y"),
        Statistic("corr", 2, _statefn("state_corr"), order=2, doc="Pearson correlation of x and y"),
        Statistic(
            "linear_fit",
            2,
            _statefn("state_linear_fit"),
            fields=("intercept", "slope", "intercept_error", "slope_error"),
            order=2,
            doc="weighted least-squares line y = intercept + slope x (as ak.linear_fit)",
        ),
    )
}


def names() -> tuple[str, ...]:
    """Every registered statistic, in registration order."""
    return tuple(STATISTICS)


def univariate() -> tuple[str, ...]:
    """The statistics of one variable (of a ``Moments`` state)."""
    return tuple(n for n, s in STATISTICS.items() if s.arity == 1)


def bivariate() -> tuple[str, ...]:
    """The statistics of two variables (of a ``CoMoments`` state)."""
    return tuple(n for n, s in STATISTICS.items() if s.arity == 2)


def moment_order(stats: Iterable[str]) -> int:
    """The highest moment order the statistics ``stats`` declare (0 for none)."""
    return max((STATISTICS[n].order for n in stats), default=0)


# The statistics shipped (a statistic registered later is in the functions above, not here).
NAMES: tuple[str, ...] = names()
UNIVARIATE: tuple[str, ...] = univariate()
BIVARIATE: tuple[str, ...] = bivariate()


def json_paths(name: str) -> tuple[str, ...]:
    """Dotted paths of a statistic's values below its observable: ``("mean",)``,
    ``("linear_fit.intercept", "linear_fit.slope", ...)``."""
    stat = STATISTICS[name]
    return tuple(f"{name}.{f}" for f in stat.fields) if stat.fields else (name,)


def observable_statistics(states: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """JAX: ``{name: value}`` of the statistics ``names`` of one observable, from its
    merged ``states`` (``{"moments": Moments, "comoments": CoMoments}``, the latter only
    for two variables). Values are arrays, or dicts of arrays for statistics with
    ``fields``; empty ``names`` give ``{}``."""
    out = {}
    for name in names:
        stat = STATISTICS[name]
        out[name] = stat.of_state(states[stat.state])
    return out
