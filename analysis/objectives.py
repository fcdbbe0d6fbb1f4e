"""Objectives: pure JAX functions of the merged statistics of all datasets.

The optimiser minimises the sum of the configured terms:

- ``significance``: ``-Z_A``, the Asimov significance of the soft-selected signal
  yield ``s`` over the background yield ``b`` with background variance
  ``(sigma_b b)^2 + sigma_MC^2`` (Cowan, Cranmer, Gross, Vitells, Eur.Phys.J. C71 (2011) 1554):

      Z_A^2 = 2 [ (s+b) ln((s+b)(b+v) / (b^2+(s+b)v)) - (b^2/v) ln(1 + v s / (b (b+v))) ]

  and ``Z_A^2 = 2 [(s+b) ln(1+s/b) - s]`` for ``v = 0``. ``sigma_MC^2`` is the
  Monte Carlo statistical variance, ``sum_d norm_d^2 * sum of squared selected
  event weights``, plus, per background sample, the variance of one average
  simulated event ``(norm_d * sumw_d / events_d)^2``: the uncertainty of a sample
  in which (almost) no simulated event survives. Without that floor ``b`` and its
  variance can both be driven to ~0 by soft cuts and ``Z_A`` diverges; with it,
  ``Z_A -> 0`` as ``b -> 0``, so an optimum cannot hide in a corner with one
  simulated background event.
- ``target``: ``weight * (stat - value)^2`` for any statistic of results.json,
  named ``dataset.observable.stat`` (``ttbar.jet_pt.mean``,
  ``ttbar.jet_pt_eta.linear_fit.slope``) or ``dataset.yield`` /
  ``dataset.selected_sumw``.
- ``python``: ``weight * f(stats)`` with ``f`` a user's JAX function imported from
  ``"pkg.module:func"``; ``stats[dataset]`` holds ``yield``, ``mc_variance``, ``mc_variance_floor``,
  ``selected_sumw``, ``selected_sumw2``, ``sumw`` and ``observables`` as in results.json.
  Trust model: a config that names Python code runs it, like a Makefile. The module
  is looked up in the config file's directory first, then on ``sys.path`` (the same
  for ``diffcoffea`` and ``python -m analysis``, see :func:`_search_path`).

Yields: ``norm_d * selected_sumw_d`` with ``norm_d = xsec * lumi / sumw_d`` for a
dataset with ``xsec`` (pb; lumi in 1/pb; ``sumw_d`` the sum of event weights before
selection), ``scale`` if given, else 1.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax.numpy as jnp

from analysis.config import Config
from analysis.errors import ConfigError, DiffcoffeaError
from analysis.plan import Plan
from analysis.results import statistics
from analysis.stats._core import safe_sqrt


def _log1p_minus(a):
    """``log1p(a) - a`` without cancellation for small ``|a|`` (series below 1e-2)."""
    small = jnp.abs(a) < 1e-2
    a_s = jnp.where(small, a, 0.0)
    series = a_s * a_s * (-1 / 2 + a_s * (1 / 3 + a_s * (-1 / 4 + a_s * (1 / 5 + a_s * (-1 / 6)))))
    a_l = jnp.where(small, 1.0, a)
    return jnp.where(small, series, jnp.log1p(a_l) - a_l)


def asimov_significance(s, b, var_b):
    """Asimov discovery significance ``Z_A(s, b, var_b)`` (see the module docstring).

    ``b`` must be > 0 (the caller checks); ``var_b`` is an absolute variance.
    Written without cancellation (the two logarithms of the textbook form cancel
    to O(s^2) for small ``s/b``): with ``A = s b / (b^2 + (s+b) v)``,
    ``B = v s / (b (b+v))`` and ``g(a) = log1p(a) - a``,
    ``Z^2 / 2 = s^2 b^2 / ((b^2 + (s+b) v)(b + v)) + (s+b) g(A) - (b^2/v) g(B)``,
    and ``Z^2 / 2 = s^2 / b + (s+b) g(s/b)`` for ``v = 0``.
    """
    tiny = var_b <= 1e-12 * b * b
    v = jnp.where(tiny, 1.0, var_b)
    sb = s + b
    den = b * b + sb * v
    half_z2_v = (
        (s * b) ** 2 / (den * (b + v))
        + sb * _log1p_minus(s * b / den)
        - (b * b / v) * _log1p_minus(v * s / (b * (b + v)))
    )
    half_z2_0 = s * s / b + sb * _log1p_minus(s / b)
    return safe_sqrt(jnp.maximum(2.0 * jnp.where(tiny, half_z2_0, half_z2_v), 0.0))


def dataset_norm(config: Config, name: str, sumw: float) -> float:
    ds = config.datasets[name]
    if ds.xsec is not None:
        return ds.xsec * config.lumi / sumw if sumw != 0 else 0.0
    if ds.scale is not None:
        return ds.scale
    return 1.0


def _lookup(stats: dict, path: str) -> Any:
    node: Any = stats
    for part in path.split("."):
        node = node[part]
    return node


def stat_paths(config: Config, plan: Plan) -> list[str]:
    """Every statistic a ``target`` term may name."""
    paths = []
    for ds in config.datasets:
        paths += [
            f"{ds}.{k}"
            for k in (
                "yield",
                "mc_variance",
                "mc_variance_floor",
                "selected_sumw",
                "selected_sumw2",
            )
        ]
        for obs in plan.observables:
            paths += [f"{ds}.{obs.name}.{s}" for s in obs.univariate]
            for s in obs.bivariate:
                if s == "linear_fit":
                    paths += [
                        f"{ds}.{obs.name}.linear_fit.{k}"
                        for k in ("intercept", "slope", "intercept_error", "slope_error")
                    ]
                else:
                    paths.append(f"{ds}.{obs.name}.{s}")
    return paths


def _search_path(config_dir: Path | None) -> list[str]:
    """Where a ``python`` term's module is looked up: the config's directory, then ``sys.path``.

    ``sys.path[0]`` is the entry point's own directory (the current directory for
    ``python -m analysis``, the script's ``bin/`` for ``diffcoffea``); it is left out for
    those two entry points so that both import the same module.
    """
    path = list(sys.path)
    entry = sys.argv[0] if sys.argv else ""
    if path and (
        Path(entry).name in ("diffcoffea", "diffcoffea.exe")
        or Path(entry).parts[-2:] == ("analysis", "__main__.py")
    ):
        path = path[1:]
    return ([str(config_dir)] if config_dir is not None else []) + path


def _import_function(spec: str, where: str, config_dir: Path | None = None) -> Callable:
    """Import ``"pkg.module:func"`` from the config's directory, else ``sys.path``.

    Trust model: a config that names Python code runs it, like a Makefile; only run
    configs you trust. Nothing else in a config or data file runs code.
    """
    module, _, name = spec.partition(":")
    saved = sys.path[:]
    try:
        sys.path[:] = _search_path(config_dir)  # restored below: only this lookup changes
        try:
            fn = getattr(importlib.import_module(module), name)
        finally:
            sys.path[:] = saved
    except Exception as err:
        looked = f"; looked in {config_dir} and sys.path" if config_dir is not None else ""
        raise ConfigError(
            f"{where}: cannot import {spec!r} ({type(err).__name__}: {err}){looked}"
        ) from None
    if not callable(fn):
        raise ConfigError(f"{where}: {spec!r} is not callable")
    return fn


def _call_user(fn: Callable, spec: str, stats: dict[str, Any], source: str) -> Any:
    """Call a user's ``python`` term; its exceptions become one-line user-facing errors."""
    try:
        return fn(stats)
    except DiffcoffeaError:
        raise
    except Exception as err:
        msg = " ".join(str(err).split())
        raise DiffcoffeaError(
            f"{source}: objective: python function {spec!r} raised {type(err).__name__}: {msg}"
        ) from err


class Objective:
    """The configured objective, checked against the datasets and observables at construction."""

    def __init__(self, config: Config, plan: Plan) -> None:
        if config.objective is None:
            raise ConfigError(
                f"{config.source}: objective: missing; optimize and scan need an objective"
            )
        self.config = config
        self.plan = plan
        self.terms: list[tuple[str, Any, Any]] = []
        roles = {n: d.role for n, d in config.datasets.items()}
        self.signal = [n for n, r in roles.items() if r == "signal"]
        self.background = [n for n, r in roles.items() if r == "background"]
        paths = stat_paths(config, plan)
        for i, term in enumerate(config.objective.terms):
            where = f"{config.source}: objective.terms.{i}"
            if term.type == "significance":
                for role, names in (("signal", self.signal), ("background", self.background)):
                    if not names:
                        raise ConfigError(
                            f"{where}: significance needs a dataset with role: {role}; none of "
                            f"{', '.join(config.datasets)} has it"
                        )
                self.terms.append(("significance", term, None))
            elif term.type == "target":
                dataset = term.stat.split(".", 1)[0]
                if dataset not in config.datasets:
                    raise ConfigError(
                        f"{where}.stat: {term.stat!r} names unknown dataset {dataset!r}; "
                        f"datasets: {', '.join(config.datasets)}"
                    )
                if term.stat not in paths:
                    import difflib

                    close = difflib.get_close_matches(term.stat, paths, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise ConfigError(f"{where}.stat: unknown statistic {term.stat!r}{hint}")
                self.terms.append(("target", term, None))
            else:
                self.terms.append(
                    (
                        "python",
                        term,
                        _import_function(term.function, f"{where}.function", config.base_dir),
                    )
                )

    def stats(
        self, states: dict[str, Any], sumw: dict[str, float], events: dict[str, int]
    ) -> dict[str, Any]:
        """JAX: results.json-like statistics of every dataset, plus normalised yields."""
        out = {}
        for name, st in states.items():
            s = statistics(st, self.plan)
            norm = dataset_norm(self.config, name, sumw[name])
            s["sumw"] = sumw[name]
            s["yield"] = norm * s["selected_sumw"]
            s["mc_variance"] = norm * norm * s["selected_sumw2"]
            one_event = norm * sumw[name] / events[name] if events[name] else 0.0
            s["mc_variance_floor"] = one_event * one_event
            out[name] = {**s, **s.pop("observables")}
        return out

    def check(self, stats: dict[str, Any]) -> None:
        """Raise a clear error when the objective is undefined (zero background yield)."""
        if any(t[0] == "significance" for t in self.terms):
            b = sum(float(stats[n]["yield"]) for n in self.background)
            if not b > 0:
                raise DiffcoffeaError(
                    f"{self.config.source}: objective: background yield is {b:g} "
                    f"(datasets {', '.join(self.background)}); the significance is undefined - "
                    "loosen the selection or check the background files"
                )

    def value(self, stats: dict[str, Any]):
        """JAX: the objective (to minimise) from :meth:`stats`."""
        total = 0.0
        for kind, term, fn in self.terms:
            if kind == "significance":
                total = total - term.weight * self._z(stats, term.sigma_b)
            elif kind == "target":
                total = total + term.weight * (_lookup(stats, term.stat) - term.value) ** 2
            else:
                total = total + term.weight * _call_user(
                    fn, term.function, stats, self.config.source
                )
        return total

    def significance(self, stats: dict[str, Any], sigma_b: float = 0.0):
        """JAX: ``Z_A`` alone (for reports), with the first significance term's ``sigma_b``."""
        for kind, term, _ in self.terms:
            if kind == "significance":
                sigma_b = term.sigma_b
                break
        return self._z(stats, sigma_b)

    def _z(self, stats: dict[str, Any], sigma_b: float):
        s = sum(stats[n]["yield"] for n in self.signal)
        b = sum(stats[n]["yield"] for n in self.background)
        var = (sigma_b * b) ** 2 + sum(
            stats[n]["mc_variance"] + stats[n]["mc_variance_floor"] for n in self.background
        )
        return asimov_significance(s, jnp.where(b > 0, b, 1.0), var)
