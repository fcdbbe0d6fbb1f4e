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
  for ``diffcoffea`` and ``python -m analysis``, see :func:`analysis.config.terms._search_path`).

Each term is a class of :mod:`analysis.config.terms` (its config keys, checks and value);
this module builds the statistics they read and sums them, with derivatives.

Yields: ``norm_d * selected_sumw_d`` with ``norm_d = xsec * lumi / sumw_d`` for a
dataset with ``xsec`` (pb; lumi in 1/pb; ``sumw_d`` the sum of event weights before
selection), ``scale`` if given, else 1.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from analysis.config.likelihood import build_model, model_states
from analysis.config.loader import Config
from analysis.config.terms import (
    DiscoverySignificanceTerm,
    PythonTerm,
    SignificanceTerm,
    Term,
    asimov_significance,
    significance_z,
)
from analysis.errors import ConfigError, DiffcoffeaError
from analysis.pipeline.plan import Plan, only_observables
from analysis.pipeline.results import DatasetState, derivatives, statistics
from analysis.spec.statistics import json_paths
from analysis.stats._programs import program_call
from analysis.stats.histogram import Histogram

__all__ = [
    "DATASET_STATS",
    "Objective",
    "asimov_significance",
    "dataset_norm",
    "dataset_scales",
    "dataset_stats",
    "objective_from_states",
    "scaled_stats",
    "stat_paths",
    "step_observables",
]


def dataset_norm(config: Config, name: str, sumw: float) -> float:
    """``norm_d``: ``xsec * lumi / sumw_d`` (0 if ``sumw_d`` is 0), else ``scale``, else 1."""
    ds = config.datasets[name]
    if ds.xsec is not None:
        return ds.xsec * config.lumi / sumw if sumw != 0 else 0.0
    if ds.scale is not None:
        return ds.scale
    return 1.0


# Dataset-level statistics of results.json (beside each observable's statistics).
DATASET_STATS = ("yield", "mc_variance", "mc_variance_floor", "selected_sumw", "selected_sumw2")


def stat_paths(config: Config, plan: Plan) -> list[str]:
    """Every statistic a ``target`` term may name (from the registry of statistics)."""
    paths = []
    for ds in config.datasets:
        paths += [f"{ds}.{k}" for k in DATASET_STATS]
        for obs in plan.observables:
            paths += [f"{ds}.{obs.name}.{p}" for s in obs.statistics for p in json_paths(s)]
    return paths


def _scaled(h: Histogram, norm: Any) -> Histogram:
    return Histogram(tuple(h.edges.tolist()), norm * h.sumw_flow, norm * norm * h.sumw2_flow)


def dataset_scales(config: Config, sumw: dict[str, float], events: dict[str, int], *,
                   variance_scale: float = 1.0) -> dict[str, dict[str, float]]:
    """Per dataset the numbers :func:`dataset_stats` scales its sums by (Python floats):
    ``norm`` (:func:`dataset_norm`), ``sumw``, ``floor`` (the variance of one average
    simulated event ``(norm * sumw / events)^2``, 0 without events) and ``variance``
    (``variance_scale``, the MC variance's factor)."""
    out = {}
    for name, w in sumw.items():
        norm = dataset_norm(config, name, w)
        one_event = norm * w / events[name] if events[name] else 0.0
        out[name] = {"norm": norm, "sumw": w, "floor": one_event * one_event,
                     "variance": variance_scale}
    return out


def scaled_stats(plan: Plan, states: dict[str, Any],
                 scales: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """JAX: :func:`dataset_stats` from the datasets' :func:`dataset_scales` (numbers or
    traced scalars: one compiled objective serves every part of a sample, whose sums of
    weights and variance factors differ)."""
    out = {}
    for name, st in states.items():
        s = statistics(st, plan)
        norm = scales[name]["norm"]
        s["sumw"] = scales[name]["sumw"]
        s["yield"] = norm * s["selected_sumw"]
        s["mc_variance"] = scales[name]["variance"] * norm * norm * s["selected_sumw2"]
        s["mc_variance_floor"] = scales[name]["floor"]
        for group in ("histograms", "templates"):
            if group in st:
                s[group] = {k: _scaled(h, norm) for k, h in st[group].items()}
        out[name] = {**s, **s.pop("observables")}
    return out


def dataset_stats(
    config: Config, plan: Plan, states: dict[str, Any], sumw: dict[str, float],
    events: dict[str, int], *, variance_scale: float = 1.0,
) -> dict[str, Any]:
    """JAX: results.json-like statistics of every dataset, plus normalised yields and
    the normalised histogram states (``histograms``, ``templates``: sums of weights
    times ``norm_d``, of squared weights times ``norm_d^2``)."""
    return scaled_stats(plan, states, dataset_scales(config, sumw, events,
                                                     variance_scale=variance_scale))


class Objective:
    """The configured objective: its terms bound to the analysis at construction.

    ``Objective(config, plan)`` checks every term (:meth:`analysis.config.terms.Term.bind`);
    :meth:`stats` builds the statistics the terms read, :meth:`check` raises where
    the objective is undefined, :meth:`value` is the weighted sum of the terms.
    Attributes read by the terms: ``source``, ``datasets``, ``signal``,
    ``background`` (dataset names by role), ``paths`` (see :func:`stat_paths`) and
    ``base_dir`` (the config's directory, searched first for a ``python`` term's module).
    """

    def __init__(self, config: Config, plan: Plan) -> None:
        if config.objective is None:
            raise ConfigError(
                f"{config.source}: objective: missing; optimize and scan need an objective"
            )
        self.config = config
        self.plan = plan
        self.source = config.source
        self.base_dir = config.base_dir
        self.datasets = list(config.datasets)
        roles = {n: d.role for n, d in config.datasets.items()}
        self.signal = [n for n, r in roles.items() if r == "signal"]
        self.background = [n for n, r in roles.items() if r == "background"]
        self.paths = stat_paths(config, plan)
        self.likelihood_model = build_model(config)  # None without 'likelihood:'
        self.terms: list[Term] = list(config.objective.terms)
        #: the MC variance's factor (:func:`dataset_stats`); set by the optimisation
        #: loop to the fraction of the events a pass weighs (validation split)
        self.variance_scale = 1.0
        for i, term in enumerate(self.terms):
            term.bind(self, f"{config.source}: objective.terms.{i}")

    def stats(
        self, states: dict[str, Any], sumw: dict[str, float], events: dict[str, int]
    ) -> dict[str, Any]:
        """JAX: results.json-like statistics of every dataset, plus normalised yields."""
        return dataset_stats(self.config, self.plan, states, sumw, events,
                             variance_scale=self.variance_scale)

    def stats_scaled(self, states: dict[str, Any], scales: dict[str, Any]) -> dict[str, Any]:
        """JAX: :meth:`stats` from the datasets' :func:`dataset_scales`."""
        return scaled_stats(self.plan, states, scales)

    def likelihood_states(self, stats: dict[str, Any]) -> dict[str, Any]:
        """JAX: ``{dataset: {key: Histogram}}`` of the model (normalised templates)."""
        return model_states(stats, self.config)

    def reads(self) -> frozenset[str] | None:
        """The observables the terms read (the union of
        :meth:`analysis.config.terms.Term.reads`); ``None`` if a term may read any."""
        out: frozenset[str] = frozenset()
        for term in self.terms:
            r = term.reads()
            if r is None:
                return None
            out |= r
        return out

    def check(self, stats: dict[str, Any]) -> None:
        """Raise a clear error when the objective is undefined (e.g. zero background yield)."""
        for term in self.terms:
            term.check(stats, self)

    def value(self, stats: dict[str, Any]):
        """JAX: the objective (to minimise) from :meth:`stats`."""
        total = 0.0
        for term in self.terms:
            total = total + term.weight * term.loss(stats, self)
        return total

    def significance(self, stats: dict[str, Any], sigma_b: float = 0.0):
        """JAX: the significance the reports show: with a ``discovery_significance`` term
        its ``Z`` (the binned likelihood's), else ``Z_A`` with the first significance
        term's ``sigma_b``."""
        for term in self.terms:
            if isinstance(term, DiscoverySignificanceTerm):
                return -term.loss(stats, self)
        for term in self.terms:
            if isinstance(term, SignificanceTerm):
                sigma_b = term.sigma_b
                break
        return significance_z(stats, self.signal, self.background, sigma_b)


def _compiled(objective: Objective, order: int, names: tuple[str, ...]) -> Any:
    """The jitted ``(values, jacs, hesses, scales) -> (stats, value, grad, hess)`` of
    ``objective`` (``scales``: :func:`dataset_scales`).

    Compiled once per objective, order and datasets ``names``: the datasets' totals and
    the MC variance's factor are arguments, not constants, so the training, held-out and
    whole samples of keep-best and the final evaluations (whose sums of weights and
    variance factors differ) share one program (the README main job compiled one for
    each), instead of tracing the statistics and their ``jacfwd`` again at every step (~0.2 s a step),
    compiled ahead of time (:func:`analysis.stats._programs.program_call`, keyed by
    :func:`_program_description` and the states' structure and shapes; a new process
    loads the compilation from JAX's persistent cache).
    An objective with a ``python`` term runs eagerly: the user's function is called
    once per step with plain numbers (it may check them, or use Python control flow
    that ``jit`` would refuse), as documented for that term.
    """
    key = (order, names)
    cache = objective.__dict__.setdefault("_compiled", {})
    if key not in cache:

        def run(values, jacs, hesses, scales):
            def fn(s):
                stats = objective.stats_scaled(s, scales)
                out = {"objective": objective.value(stats)}
                if objective.signal and objective.background:
                    out["significance"] = objective.significance(stats)
                return out

            stats0 = objective.stats_scaled(values, scales)
            return (stats0, *derivatives(fn, values, jacs, hesses, order=order))

        if any(isinstance(term, PythonTerm) for term in objective.terms):
            cache[key] = run
        else:
            described = _program_description(objective, key)

            def compiled(values, jacs, hesses, scales):
                return program_call("objective", _ignore_description(run), values, jacs,
                                   hesses, scales, description=described)

            cache[key] = compiled
    return cache[key]


def _ignore_description(run: Any) -> Any:
    """``run`` accepting (and ignoring) :func:`analysis.stats._programs.program_call`'s
    ``description`` option: it only keys the program."""

    def program(values: Any, jacs: Any, hesses: Any, scales: Any, *, description: str) -> Any:
        return run(values, jacs, hesses, scales)

    return program


def _program_description(objective: Objective, key: tuple) -> str:
    """What decides :func:`_compiled`'s program besides the states' structure and
    shapes (which :func:`analysis.stats._programs.program_call` adds), as one digest: the
    configuration but its output, executor and optimiser sections (a path, the
    workers, the step size never enter the objective), the plan, ``key`` (order,
    dataset totals, variance scale). Programs live in this process only, so the
    libraries' versions (one per process) do not enter it."""
    config = objective.config.model_dump(
        mode="json", exclude={"output": True, "executor": True, "optimizer": True})
    parts = [json.dumps(config, sort_keys=True, default=str), repr(objective.plan), repr(key)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def objective_from_states(
    objective: Objective, states: dict[str, DatasetState], *, order: int = 1, strict: bool = True
) -> dict[str, Any]:
    """Objective value, gradient (and Hessian) from merged per-dataset states.

    Also returns the significance (if configured) and each dataset's yield, for
    the history. Where the objective is undefined (zero background yield) it raises
    :class:`DiffcoffeaError`, or with ``strict=False`` returns ``None`` values and
    the message under ``"error"`` (for the final report).
    """
    values, jacs, hesses = {}, {}, {}
    # only the observables the terms read go in (a pass's others: not), so a pass with
    # all of them (the first and last steps, the final evaluations) runs the program of
    # the steps' passes (one program fewer to trace and lower per process)
    reads = objective.reads()
    for name, st in states.items():
        values[name], jacs[name], hesses[name] = (
            t if reads is None or t is None else _with_observables(t, reads)
            for t in st.taylor())
    sumw = {name: st.sumw for name, st in states.items()}
    events = {name: st.events for name, st in states.items()}
    run = _compiled(objective, order, tuple(sumw))
    scales = dataset_scales(objective.config, sumw, events,
                            variance_scale=objective.variance_scale)
    stats0, val, grad, hess = run(values, jacs, hesses if order >= 2 else None, scales)
    yields = {n: float(stats0[n]["yield"]) for n in states}
    try:
        objective.check(stats0)
    except DiffcoffeaError as err:
        if strict:
            raise
        return {
            "objective": None,
            "grad": None,
            "hess": None,
            "significance": None,
            "yields": yields,
            "error": str(err),
        }
    return {
        "objective": float(val["objective"]),
        "grad": np.asarray(grad["objective"], dtype=np.float64),
        "hess": None if hess is None else np.asarray(hess["objective"], dtype=np.float64),
        "significance": float(val["significance"]) if "significance" in val else None,
        "yields": yields,
    }


def _with_observables(tree: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
    """A dataset's states pytree with only the observables ``names`` (the rest as is)."""
    held = tree.get("observables")
    if held is None or held.keys() <= names:
        return tree
    return {**tree, "observables": {k: v for k, v in held.items() if k in names}}


def step_observables(objective: Objective, plan: Plan, order: int) -> tuple[str, ...] | None:
    """The observables an optimisation step computes: those ``objective`` reads
    (:meth:`Objective.reads`), in plan order; ``None`` (all of them) if a term may read
    any, if it reads every one, or if the numba kernel does not serve the plan without
    the others (on the JAX kernel another plan is another compilation)."""
    reads = objective.reads()
    if reads is None:
        return None
    reduced = only_observables(plan, reads)
    if reduced is plan:
        return None
    from analysis.pipeline.backend import Backend
    from analysis.pipeline.request import Request

    served = Backend().chooser.refusal(reduced, Request(np.zeros(len(plan.param_names)),
                                                        np.zeros(plan.n_widths), order=order))
    return tuple(o.name for o in reduced.observables) if served is None else None
