"""Per-dataset accumulators and the statistics computed from them.

A chunk's output for one dataset is a :class:`DatasetState`: event count, sum of
event weights, chunk count, and a :class:`analysis.stats.Derived` holding the
mergeable states (yields, centred moment sums, co-moments) with their Jacobian (and
optionally Hessian) with respect to the trainable parameters. ``DatasetState.__add__``
adds the counts and merges the ``Derived`` exactly (:mod:`analysis.stats.merge`), so
coffea's ``processor.accumulate`` gives the same result for any chunking, executor or
merge order. This is the same public derivative-carrying state that hand-written
processors return (``processors/``): one code path for derivatives and merging.

Statistics are computed once, at the end, by a JAX function of the merged states.
Their derivatives follow from the states' Taylor expansion: for states
``s(theta0 + d) = s0 + J d + d^T H d / 2 + ...``, any function ``g`` of the states has
``grad g = d/dd g(s0 + J d) at d = 0`` (and the Hessian likewise), which
:func:`derivatives` (:func:`analysis.stats.derive.taylor_derivatives`) evaluates
with ``jax.jacfwd``.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline.plan import Plan
from analysis.select.subsets import EXPENSIVE_ABOVE
from analysis.spec.statistics import observable_statistics
from analysis.stats._programs import program_call
from analysis.stats.derive import Derived
from analysis.stats.derive import taylor_derivatives as derivatives

__all__ = [
    "MIN_EFFECTIVE_EVENTS",
    "YIELDS",
    "DatasetState",
    "dataset_report",
    "derivatives",
    "effective_events",
    "enumeration_counts",
    "log_enumeration",
    "state_names",
    "state_tree",
    "yield_cotangents",
    "statistics",
    "unreliable_reason",
    "width_labels",
]

_log = logging.getLogger("analysis.pipeline.results")

#: below this selected effective number of events (or with no event passing the hard
#: cuts) a dataset's statistics are marked unreliable in the report and results.json
MIN_EFFECTIVE_EVENTS = 10.0


def _add_enumeration(a, b):
    """Two chunks' :attr:`DatasetState.enumeration` counts: sums, and the larger largest."""
    if a is None or b is None:
        return a if b is None else b
    return (a[0] + b[0], a[1] + b[1], max(a[2], b[2]))


def enumeration_counts(uncertain: dict, n_events: int) -> tuple[int, int, int]:
    """:attr:`~analysis.pipeline.results.DatasetState.enumeration` of a chunk of
    ``n_events`` from the uncertain objects per event of each collection (``uncertain``:
    ``{collection: (E,) int}``): ``(events, events with more than EXPENSIVE_ABOVE in a
    collection, the most in an event)``."""
    expensive = np.zeros(n_events, dtype=bool)
    largest = 0
    for n in uncertain.values():
        expensive |= np.asarray(n) > EXPENSIVE_ABOVE
        largest = max(largest, int(np.max(n, initial=0)))
    return n_events, int(expensive.sum()), largest


def log_enumeration(states) -> None:
    """The ``--debug`` line of a pass's event-sum enumeration (``states``: the pass's
    :class:`~analysis.pipeline.results.DatasetState` per dataset; nothing without one)."""
    counts = [s.enumeration for s in states.values()
              if getattr(s, "enumeration", None) is not None]
    if not counts:
        return
    events = sum(c[0] for c in counts)
    expensive = sum(c[1] for c in counts)
    largest = max(c[2] for c in counts)
    _log.debug("event-sum histograms: %d of %d events had more than %d uncertain objects; "
               "at most %d uncertain objects in an event", expensive, events,
               EXPENSIVE_ABOVE, largest)


#: the selected yield and its sum of squared weights: the states every pass gives
YIELDS = ("selected_sumw", "selected_sumw2")


def state_tree(selected_sumw: Any, selected_sumw2: Any, observables: dict, *,
               histograms: dict | None = None, templates: dict | None = None) -> dict:
    """One chunk's states as the pytree every backend returns (values, or their
    Jacobians with a trailing parameter axis): the one constructor of its keys.

    Parameters
    ----------
    selected_sumw, selected_sumw2
        The selected sum of weights and of squared weights (float64 scalars).
    observables
        ``{name: {"moments": Moments, "comoments": CoMoments}}``.
    histograms, templates
        Keyword-only. ``{key: Histogram}`` of the plan's histograms and likelihood
        templates (:class:`analysis.pipeline.histplan.HistSpec` ``group``); left out
        when None (a plan without histograms).

    Returns
    -------
    dict
        ``{"selected_sumw", "selected_sumw2", "observables"[, "histograms",
        "templates"]}``; trees of one plan merge exactly by ``+``
        (:class:`analysis.stats.Derived` in :class:`DatasetState`).
    """
    tree = {YIELDS[0]: selected_sumw, YIELDS[1]: selected_sumw2, "observables": observables}
    if histograms is not None:
        tree["histograms"] = histograms
    if templates is not None:
        tree["templates"] = templates
    return tree


def state_names(plan: Plan) -> list[str]:
    """The dotted names of the value states of a plan without histograms, in the order
    ``jax.tree_util`` flattens them (dict keys sorted; a state is a leaf): per
    observable ``observables.NAME.comoments`` and ``.moments`` (the event sums
    ``sum``/``count``: moments only), then :data:`YIELDS`."""
    names = []
    for obs in sorted(plan.observables, key=lambda o: o.name):
        parts = (["moments"] if obs.x.kind in ("sum", "count") else
                 (["comoments"] if obs.bivariate else []) + (["moments"] if obs.univariate
                                                              else []))
        names += [f"observables.{obs.name}.{p}" for p in parts]
    return names + list(YIELDS)


def yield_cotangents(names: list[str], payload: list) -> tuple[float, float] | str:
    """``(a1, a2)``: the cotangents of the yield and its square in ``payload`` (aligned
    with the state ``names``, :func:`state_names`; 0 for a pruned entry), or the name of
    the first other state the payload reads."""
    if len(names) != len(payload):
        return f"{len(payload)} payload entries for {len(names)} states"
    for name, entry in zip(names, payload, strict=True):
        if entry is not None and name not in YIELDS:
            return name
    entries = [payload[names.index(n)] for n in YIELDS]
    a1, a2 = (0.0 if e is None else float(np.asarray(e[1])) for e in entries)
    return a1, a2


class DatasetState:
    """Mergeable per-dataset result of one or more chunks (see the module docstring).

    ``derived``: the states pytree ``{"selected_sumw", "selected_sumw2",
    "observables": {name: {"moments": Moments, "comoments": CoMoments}}}`` with its
    derivatives (order 0 for grid passes: leaves with a leading grid axis, no
    derivatives).
    """

    def __init__(self, *, events: int, sumw: float, derived: Derived, chunks: int = 1,
                 enumeration: tuple[int, int, int] | None = None) -> None:
        """The one constructor, of a chunk's state (``chunks=1``, the default), of a
        merge (:meth:`__add__`) and of an empty dataset's (``chunks=0``).

        Parameters
        ----------
        events, sumw
            The events read and their sum of weights.
        derived
            The states with their derivatives (:class:`analysis.stats.Derived`, or a
            :class:`analysis.stats.Pullback` for reverse mode's passes).
        chunks
            How many chunks were merged into it.
        enumeration
            The subset enumeration of event-sum histograms, where there is one.
        """
        self.events = int(events)
        self.sumw = float(sumw)
        self.chunks = int(chunks)
        self.derived = derived
        #: the subset enumeration of event-sum histograms, where there is one: ``(events,
        #: events with more than 12 uncertain objects (the expensive ones), the most
        #: uncertain objects of an event)`` (:func:`analysis.pipeline.backends.jax.passes.enumeration_shapes`)
        self.enumeration = enumeration

    def __add__(self, other: DatasetState) -> DatasetState:
        if not isinstance(other, DatasetState):
            return NotImplemented
        return DatasetState(
            events=self.events + other.events,
            sumw=self.sumw + other.sumw,
            chunks=self.chunks + other.chunks,
            derived=self.derived + other.derived,
            enumeration=_add_enumeration(self.enumeration, other.enumeration),
        )

    @property
    def n_params(self) -> int:
        return self.derived.n_params

    @property
    def observables(self) -> dict[str, dict[str, Any]]:
        """``{name: {"moments": Moments, "comoments": CoMoments}}`` (merged values)."""
        return self.derived.value["observables"]

    def taylor(self) -> tuple[dict, dict, dict | None]:
        """``(values, jacobians, hessians)`` pytrees of the states (JAX-ready, float64).

        Leaves of ``values`` are arrays; Moments/CoMoments keep their NamedTuple type.
        Without derivatives (grid passes) the Jacobians are zeros with a trailing
        axis of length ``n_params``.
        """
        value, jac, hess = self.derived.taylor()
        if jac is None:
            p = self.n_params
            jac = jax.tree_util.tree_map(lambda v: np.zeros(np.shape(v) + (p,)), value)
        return value, jac, hess


def statistics(states: dict, plan: Plan) -> dict:
    """JAX function: the statistics of one dataset from its (merged) states.

    Returns ``{"selected_sumw", "selected_sumw2", "observables": {name: {stat: value}}}``
    with ``linear_fit`` a dict of intercept, slope and their errors, for the observables
    the states hold (all of ``plan``'s, or those of a pass of
    :func:`analysis.pipeline.plan.only_observables`).
    """
    held = states["observables"]
    return {
        "selected_sumw": states["selected_sumw"],
        "selected_sumw2": states["selected_sumw2"],
        "observables": {
            obs.name: observable_statistics(held[obs.name], obs.statistics)
            for obs in plan.observables if obs.name in held
        },
    }


def _num(x: Any) -> float | None:
    """JSON number; NaN (undefined statistic) becomes ``null``."""
    x = float(x)
    return None if math.isnan(x) else x


def _grad_dict(g: np.ndarray | None, names: tuple[str, ...]) -> dict[str, float | None] | None:
    if g is None:  # a values-only pass (dataset_report)
        return None
    return {n: _num(v) for n, v in zip(names, np.asarray(g).reshape(-1))}


def effective_events(sumw: float | None, sumw2: float | None) -> float | None:
    """Kish's effective number of events ``sumw**2 / sumw2`` of a selection (``sumw``:
    sum of the selection weights times event weights, ``sumw2``: sum of their squares);
    ``None`` (null) when ``sumw2`` is 0 or undefined (nothing selected). Equals the
    number of selected events for equal weights and hard cuts."""
    if sumw is None or sumw2 is None or not sumw2 > 0 or not math.isfinite(sumw):
        return None
    return sumw * sumw / sumw2


def unreliable_reason(
    effective: float | None, hard: int | None, *, threshold: float = MIN_EFFECTIVE_EVENTS
) -> str | None:
    """Why a dataset's statistics cannot be taken as results, in a few words, or ``None``.

    Unreliable: fewer than ``threshold`` effective selected events (:func:`effective_events`;
    none at all counts as 0), or ``hard == 0`` events passing the hard cuts (width 0) at the
    evaluated parameters (``hard=None``: not counted)."""
    parts = []
    eff = 0.0 if effective is None else effective
    if eff < threshold:
        parts.append(f"{_short(eff)} effective events < {threshold:g}")
    if hard == 0:
        parts.append("no event passes the hard cuts")
    return "; ".join(parts) or None


def _short(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def width_labels(config) -> list[str]:
    """A name for each cut width, in the order of :func:`analysis.pipeline.plan.initial_widths`
    (object cuts, then event cuts, channels' own, soft bins): ``"jets.pt > jet_pt_min"``,
    ``"count(Jet) >= min_jets"``, ``"muons.pt window [mu_pt_lo, 200]"``, ``"histogram ht
    bins"`` (results.json keys its widths by these).
    Duplicates get ``" #2"``, ``" #3"``."""

    def threshold(c) -> str:
        # one threshold (param or value), or a kind's several (a window's lo and hi)
        pairs = c.thresholds() if hasattr(c, "thresholds") else ((c.param, c.value),)
        shown = [p if p is not None else f"{v:g}" for p, v in pairs]
        return shown[0] if len(shown) == 1 else f"[{', '.join(shown)}]"

    def cut(prefix: str, c) -> str:
        return f"{prefix}.{c.var} {c.op} {threshold(c)}"

    def event(e) -> str:
        count = getattr(e, "count", None)
        if count is not None:
            what = f"count({'+'.join(count) if isinstance(count, list) else count})"
        else:
            what = e.var
        return f"{what} {e.op} {threshold(e)}"

    labels: list[str] = []
    if config.objects:
        labels = [cut(name, c) for name, s in config.objects.items() for c in s.cuts]
        labels += [event(e) for e in config.selection.entries or [] if e.has_width]
        # a channel's own conditions (analysis.pipeline.histplan.extra_widths' order)
        for name, ch in (config.likelihood.channels.items() if config.likelihood else ()):
            labels += [f"{name}: {event(e)}" for e in ch.selection if e.has_width]
    else:
        sel = config.selection
        objects = getattr(sel, "objects", None)
        if objects is not None:
            labels = [cut(objects.collection, c) for c in objects.cuts]
        labels += [event(e) for e in getattr(sel, "events", None) or []]
    # the soft bins of the histograms (analysis.pipeline.histplan.extra_widths' order)
    labels += [f"histogram {h.name} bins" for h in config.histograms if h.width > 0]
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


@functools.lru_cache(maxsize=8)
def _report_derivatives(plan: Plan, order: int):
    """``derivatives`` of :func:`statistics` (``(values, jacs, hesses) -> (value, grad,
    hess)``) as ONE compiled program per plan and order. Run eagerly, it is some thirty
    small operations, each its own XLA program, which a new process loads one by one
    from the persistent compilation cache (~0.5 s for the first dataset's report).
    Values equal the eager ones to ~1e-16 relative (XLA fuses the operations). The
    program is compiled ahead of time (:func:`analysis.stats._programs.program_call`,
    keyed by what :func:`statistics` reads of the plan: each observable's name and
    statistics); a new process loads the compilation from JAX's persistent cache."""
    reads = repr([(obs.name, obs.statistics) for obs in plan.observables])

    def run(values, jacs, hesses, *, reads: str, order: int):
        return derivatives(lambda s: statistics(s, plan), values, jacs, hesses, order=order)

    def program(values, jacs, hesses):
        return program_call("report_derivatives", run, values, jacs, hesses, reads=reads,
                           order=order)

    return program


def dataset_report(state: DatasetState, plan: Plan, *, order: int = 1) -> dict:
    """The ``results.json`` entry of one dataset: values and gradients of every statistic,
    and ``effective_events`` (:func:`effective_events` of the selected sums).

    States from a values-only pass (no Jacobian: reverse mode's first pass, which
    ``optimize`` keeps above :data:`analysis.stats.derive.AUTO_FORWARD_MAX` trainable
    parameters) have no per-statistic gradients: every ``*_grad`` and ``"grad"`` is
    then ``null`` (not zeros) and ``"gradients"`` says why; a statistic's gradient with
    respect to thousands of parameters would cost one reverse pass per statistic."""
    values_only = state.derived.taylor()[1] is None and bool(plan.trainable)
    values, jacs, hesses = state.taylor()
    if values_only:  # no gradients, and said so (not zeros)
        val = statistics(jax.tree_util.tree_map(jnp.asarray, values), plan)
        grad = jax.tree_util.tree_map(lambda _: None, val)
    else:
        val, grad, _ = _report_derivatives(plan, order)(values, jacs, hesses)
    names = plan.trainable_names
    out: dict[str, Any] = {"events": state.events, "chunks": state.chunks, "sumw": state.sumw}
    for key in ("selected_sumw", "selected_sumw2"):
        out[key] = _num(val[key])
        out[f"{key}_grad"] = _grad_dict(grad[key], names)
    out["effective_events"] = effective_events(out["selected_sumw"], out["selected_sumw2"])
    if values_only:
        out["gradients"] = ("not computed: values-only pass (reverse mode computes the "
                            "objective's gradient only)")
    obs_out: dict[str, Any] = {}
    for name, stats in val["observables"].items():
        entry: dict[str, Any] = {}
        for stat, v in stats.items():
            g = grad["observables"][name][stat]
            if isinstance(v, dict):
                entry[stat] = {k: {"value": _num(v[k]), "grad": _grad_dict(g[k], names)} for k in v}
            else:
                entry[stat] = {"value": _num(v), "grad": _grad_dict(g, names)}
        obs_out[name] = entry
    out["observables"] = obs_out
    return out
