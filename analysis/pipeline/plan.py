"""The static plan of an analysis: which columns to read and what to compute.

A :class:`Plan` is built once from the validated config. It is a frozen, hashable
description (cuts, observables, parameter order), so it can be a static argument of
``jax.jit`` and is cheap to pickle to coffea workers. Parameter *values* and cut
widths are not part of it: they change every optimisation step without recompiling.

There is one form of plan: object sets (``sets``, a :class:`SetPlan`), a selection list
of joint counts and branch cuts, and observables in the grammar of
:mod:`analysis.select.exprs`. The single-collection YAML form (``selection: {objects,
events}``) is rewritten into it by the loader, so a plan does not know which form was
written; :mod:`analysis.pipeline.backends.jax.setkernel` (JAX) and :mod:`analysis.pipeline.backends.numba.fastkernel`
(numba) compute it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from dataclasses import dataclass

from analysis.config.loader import Config
from analysis.config.score import SCORE_PREFIX
from analysis.errors import ConfigError
from analysis.pipeline import histplan
from analysis.pipeline.score import ScoreSpec, score_specs
from analysis.select import exprs, functions
from analysis.select.objects import Count, CountModel, ObjectSet, required_cap
from analysis.spec import statistics as registry

__all__ = [
    "BIVARIATE_STATS",
    "UNIVARIATE_STATS",
    "EventVarCut",
    "ObjectCut",
    "Observable",
    "Plan",
    "SetPlan",
    "SetSpec",
    "build_plan",
    "initial_widths",
    "only_observables",
    "threshold_value",
]

# The shipped statistics (one variable: of Moments; two: of CoMoments); the plan reads
# the registry itself (:func:`_split_stats`), so a statistic registered later is seen.
UNIVARIATE_STATS = registry.UNIVARIATE
BIVARIATE_STATS = registry.BIVARIATE

def _split_stats(stats) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(of one variable, of two)`` of an observable's statistics, from the registry."""
    arity = {n: registry.STATISTICS[n].arity for n in stats}
    return tuple(n for n in stats if arity[n] == 1), tuple(n for n in stats if arity[n] == 2)


def threshold_value(theta, param: int | None, value: float | None):
    """A threshold's value: the parameter ``theta[param]``, else the constant ``value``
    (as ``theta``'s dtype; ``theta`` a numpy or JAX vector). The one reading of a
    ``(param, value)`` pair, for every kernel."""
    return theta[param] if param is not None else theta.dtype.type(value)


class _CutKind:
    """The cut kind (:mod:`analysis.select.cuts`) of a cut and its thresholds."""

    greater: bool
    inclusive: bool
    param: int | None
    value: float | None
    op: str
    more: tuple[tuple[int | None, float | None], ...]

    @property
    def kind_op(self) -> str:
        """The ``op`` that picks the cut kind (a threshold's from ``greater``/``inclusive``
        when built without one)."""
        if self.op:
            return self.op
        return (">" if self.greater else "<") + ("=" if self.inclusive else "")

    @property
    def bounds(self) -> tuple[tuple[int | None, float | None], ...]:
        """``(param, value)`` of every threshold, in the kind's ``bounds`` order."""
        return ((self.param, self.value),) + self.more

    def threshold_values(self, theta) -> list:
        """The values of :attr:`bounds` for the parameter vector ``theta``."""
        return [threshold_value(theta, p, v) for p, v in self.bounds]


@dataclass(frozen=True)
class ObjectCut(_CutKind):
    """Soft cut on a field of an object set's collection: ``field OP threshold`` per object.

    ``absolute`` cuts ``|field|``; ``greater`` is True for ``>``/``>=``; ``inclusive``
    for ``>=``/``<=`` (matters only for the hard step, width 0). The threshold is the
    parameter at index ``param`` of the full parameter vector, or the constant
    ``value``; its sigmoid width is ``widths[width_index]``. ``op``: the cut kind's op
    (``"window"``; empty: the threshold of ``greater``/``inclusive``); ``more``: the
    thresholds after the first (a window's ``hi``; its ``lo`` is ``param``/``value``).
    """

    field: str
    absolute: bool
    greater: bool  # ">" / ">=": pass when value exceeds the threshold
    inclusive: bool
    param: int | None  # index into the full parameter vector
    value: float | None
    width_index: int
    op: str = ""
    more: tuple[tuple[int | None, float | None], ...] = ()


@dataclass(frozen=True)
class EventVarCut(_CutKind):
    """Soft cut on the per-event branch ``key`` (e.g. ``MET.pt``): ``key OP threshold``.

    Fields as :class:`ObjectCut`; the event weight is multiplied by the pass probability.
    """

    key: str
    greater: bool
    inclusive: bool
    param: int | None
    value: float | None
    width_index: int
    op: str = ""
    more: tuple[tuple[int | None, float | None], ...] = ()


def _cut_args(cut, names: tuple[str, ...], width_index: int) -> dict:
    """The threshold fields of :class:`ObjectCut`/:class:`EventVarCut` for a config cut."""
    (param, value), *more = (_threshold(p, v, names) for p, v in cut.thresholds())
    return {"greater": cut.op in (">", ">="), "inclusive": cut.op in (">=", "<="),
            "param": param, "value": value, "width_index": width_index, "op": cut.op,
            "more": tuple(more)}


@dataclass(frozen=True)
class Observable:
    """An observable: expression ``x`` (and ``y`` for statistics of two variables) and the
    statistics asked for, split by arity (names of :mod:`analysis.spec.statistics`)."""

    name: str
    x: exprs.Node
    y: exprs.Node | None
    univariate: tuple[str, ...]
    bivariate: tuple[str, ...]

    @property
    def statistics(self) -> tuple[str, ...]:
        """All statistics of this observable, those of one variable first."""
        return self.univariate + self.bivariate


@dataclass(frozen=True)
class Plan:
    """What one pass reads and computes (see the module docstring), built by :func:`build_plan`.

    Parameters are addressed by index into ``param_names`` (the full vector ``theta``);
    ``trainable`` indexes the ones derivatives are taken for. Cut widths are addressed
    by ``width_index`` (set cuts, then the selection list's entries that have one,
    ``n_widths`` in all). The columns to read are ``sets.fields`` and ``event_keys``.
    """

    param_names: tuple[str, ...]
    trainable: tuple[int, ...]  # indices of trainable parameters in param_names
    integer: tuple[bool, ...]
    event_keys: tuple[str, ...]  # per-event branches to read
    event_cuts: tuple[EventVarCut, ...]
    observables: tuple[Observable, ...]
    n_widths: int
    sets: SetPlan
    scores: tuple[ScoreSpec, ...] = ()  # learned scores (analysis.pipeline.score)
    # soft histograms, channel regions, variations (analysis.pipeline.histplan)
    hists: tuple = ()
    regions: tuple = ()
    shifts: tuple = ()
    weights: tuple = ()
    corrections: tuple = ()  # per-object scale-factor columns (histplan.CorrectionSpec)

    @property
    def trainable_names(self) -> tuple[str, ...]:
        """Names of the trainable parameters, in ``trainable`` order."""
        return tuple(self.param_names[i] for i in self.trainable)


@dataclass(frozen=True)
class SetSpec:
    """One object set: its collection, parent set, own cuts and ranking field."""

    name: str
    collection: str
    parent: str | None
    cuts: tuple[ObjectCut, ...]
    rank_by: str


@dataclass(frozen=True)
class SetPlan:
    """The object-set form of a plan (``objects:`` configs; see :mod:`analysis.pipeline.backends.jax.setkernel`).

    ``model``: the static count model; ``thresholds``: ``(param, value)`` of each of its
    counts; ``fields``: ``((collection, (field, ...)), ...)`` to read; ``nodes``: the
    parsed ``(x, y)`` of each observable, in plan order; ``orders``: power-sum order of
    each observable (the highest ``order`` its statistics declare in
    :mod:`analysis.spec.statistics`, at least 2); ``max_objects``: ``((collection,
    cap, set), ...)`` for the collections with a configured cap (the smallest over its
    root sets, and the set giving it); ``count_widths``: the width index of each
    count's smoothed integer step (``None``: a fixed integer value, exact without one);
    ``hard``: the width indices of the set cuts configured with width 0 (annealing
    scales widths, so they stay 0: :func:`analysis.data.columns.extract_columns` counts
    toward ``max_objects`` only the objects such cuts with constant thresholds leave).
    """

    sets: tuple[SetSpec, ...]
    model: CountModel
    thresholds: tuple[tuple[int | None, float | None], ...]
    fields: tuple[tuple[str, tuple[str, ...]], ...]
    nodes: tuple[tuple[exprs.Node, exprs.Node | None], ...]
    orders: tuple[int, ...]
    max_objects: tuple[tuple[str, int, str], ...] = ()
    count_widths: tuple[int | None, ...] = ()
    hard: tuple[int, ...] = ()

    @property
    def caps(self) -> dict[str, int]:
        """Collection -> its ``max_objects`` cap (capped collections only)."""
        return {c: cap for c, cap, _ in self.max_objects}

    @property
    def cap_keys(self) -> dict[str, str]:
        """Collection -> the config key of its cap (for error messages)."""
        return {c: f"objects.{name}.max_objects" for c, _, name in self.max_objects}

    def collection_of(self, name: str) -> str:
        return next(s.collection for s in self.sets if s.name == name)


def _object_cut(cut, names: tuple[str, ...], width_index: int) -> ObjectCut:
    absolute = cut.var.startswith("abs_")
    return ObjectCut(cut.var[4:] if absolute else cut.var, absolute,
                     **_cut_args(cut, names, width_index))


def _threshold(cfg_param: str | None, cfg_value: float | None, names: tuple[str, ...]):
    return (names.index(cfg_param), None) if cfg_param is not None else (None, float(cfg_value))


def build_plan(config: Config) -> Plan:
    """Turn a validated :class:`~analysis.config.loader.Config` into a :class:`Plan`."""
    score_params = config.learned_parameters()  # after the declared ones: scores', edges
    names = tuple(config.parameters) + tuple(n for n, _, _ in score_params)
    trainable = tuple(i for i, n in enumerate(config.parameters)
                      if config.parameters[n].trainable)
    trainable += tuple(len(config.parameters) + i for i, (_, _, t) in enumerate(score_params) if t)
    integer = tuple(config.parameters[n].integer for n in config.parameters)
    integer += (False,) * len(score_params)
    src = config.source
    cfg_sets = config.objects

    def collection(name: str) -> str:
        s = cfg_sets[name]
        return s.collection if s.collection is not None else collection(s.from_)

    n_widths = 0
    hard: list[int] = []
    specs = []
    fields: dict[str, list[str]] = {}

    def need(c: str, f: str) -> None:
        fields.setdefault(c, [])
        if f.startswith(SCORE_PREFIX):  # computed by the kernel, not read
            return
        if f not in fields[c]:
            fields[c].append(f)

    parsed = [
        tuple(None if t is None else exprs.resolve(exprs.parse(t), cfg_sets)
              for t in (obs.x, obs.y))
        for obs in config.observables
    ]
    hist_nodes = [exprs.resolve(exprs.parse(h.x), cfg_sets) for h in config.histograms]
    # The ranking field is read only for sets that an observable indexes (S[i]).
    indexed = {s for pair in parsed for node in pair if node is not None for s, _ in node.slots}
    indexed |= {s for node in hist_nodes for s, _ in node.slots}
    for name, s in cfg_sets.items():
        c = collection(name)
        cuts = []
        for cut in s.cuts:
            oc = _object_cut(cut, names, n_widths)
            if cut.effective_width() == 0:
                hard.append(n_widths)
            n_widths += 1
            need(c, oc.field)
            cuts.append(oc)
        if name in indexed:
            need(c, s.rank_by)
        else:
            fields.setdefault(c, [])
        specs.append(SetSpec(name, c, s.from_, tuple(cuts), s.rank_by))
    counts, thresholds, event_cuts, event_keys = [], [], [], []
    count_widths: list[int | None] = []
    for entry in config.selection.entries or []:
        if entry.count is not None:
            param, value = _threshold(entry.param, entry.value, names)
            if param is not None:  # a threshold stays within its bounds (or at its init)
                p = config.parameters[entry.param]
                top = int(math.ceil(max(p.init, p.bounds[1] if p.bounds else p.init)))
            else:
                top = int(value)
            counts.append(Count(entry.sets, entry.op, required_cap(entry.op, top)))
            thresholds.append((param, value))
            # A parameter threshold's smoothed integer step has a width (annealed like
            # the others); a fixed integer value is exact without one.
            count_widths.append(n_widths if param is not None else None)
            n_widths += param is not None
        else:
            key = exprs.resolve(exprs.parse(entry.var), set()).head
            if key not in event_keys and not key.startswith(SCORE_PREFIX):
                event_keys.append(key)
            event_cuts.append(EventVarCut(key, **_cut_args(entry, names, n_widths)))
            n_widths += 1
    try:
        model = CountModel(
            tuple(ObjectSet(s.name, s.collection, s.parent) for s in specs), tuple(counts)
        )
    except ConfigError as err:
        raise ConfigError(f"{src}: objects: {err}") from None
    observables, orders = [], []

    def read(node) -> None:
        """Record the columns expression ``node`` reads."""
        if node.kind == "branch":  # score.NAME: an event-level score's values
            if node.head not in event_keys and not node.head.startswith(SCORE_PREFIX):
                event_keys.append(node.head)
        elif node.kind == "call":  # the fields the function reads (its registry entry)
            fn_fields = functions.FUNCTIONS[node.fn].fields
            for s, _ in node.slots:
                for f in fn_fields:
                    need(collection(s), f)
            for key in (f"{g}.{f}" for g in node.groups for f in fn_fields):
                if key not in event_keys:
                    event_keys.append(key)
        elif node.field is not None:
            need(collection(node.head or node.slots[0][0]), node.field)

    for node in hist_nodes:
        read(node)
    for obs, pair in zip(config.observables, parsed):
        for node in pair:
            if node is not None:
                read(node)
        uni, bi = _split_stats(obs.stats)
        # the moment order the statistics declare (at least 2: M2 is always there)
        orders.append(max(2, registry.moment_order(uni)))
        observables.append(Observable(obs.name, pair[0], pair[1], uni, bi))
    caps: dict[str, tuple[int, str]] = {}
    for name, s in cfg_sets.items():
        if s.max_objects is not None:
            c = collection(name)
            if c not in caps or s.max_objects < caps[c][0]:
                caps[c] = (s.max_objects, name)
    scores = score_specs(config, names, collection)
    for sc in scores:  # the networks' inputs are read
        for key, _ in sc.inputs:
            if sc.collection is not None:
                need(sc.collection, key)
            elif key not in event_keys:
                event_keys.append(key)
    set_plan = SetPlan(
        tuple(specs), model, tuple(thresholds),
        tuple((c, tuple(f)) for c, f in fields.items()), tuple(parsed), tuple(orders),
        max_objects=tuple((c, cap, name) for c, (cap, name) in caps.items()),
        count_widths=tuple(count_widths), hard=tuple(hard),
    )
    plan = Plan(
        param_names=names, trainable=trainable, integer=integer,
        event_keys=tuple(event_keys), event_cuts=tuple(event_cuts),
        observables=tuple(observables), n_widths=n_widths, sets=set_plan, scores=scores,
    )
    return histplan.extend(config, plan, build_plan)


def initial_widths(config: Config) -> list[float]:
    """The configured cut widths, in the plan's width order (set cuts, then the entries
    of the selection list that have one: parameter counts and branch cuts)."""
    widths = [c.effective_width() for s in config.objects.values() for c in s.cuts]
    return widths + [
        e.effective_width() for e in config.selection.entries or []
        if e.has_width
    ] + histplan.extra_widths(config)


def only_observables(plan: Plan, names: Collection[str]) -> Plan:
    """``plan`` with only the observables named in ``names`` (in plan order): the same
    columns to read (``sets.fields``, ``event_keys``), cuts, counts, parameters and
    histograms, so the same selection and the same yields, templates and their
    derivatives; the observables left out are not computed (an optimisation step whose
    objective does not read them, :meth:`analysis.config.terms.Term.reads`). ``plan``
    itself if it keeps every observable."""
    keep = [i for i, obs in enumerate(plan.observables) if obs.name in names]
    if len(keep) == len(plan.observables):
        return plan
    sets = dataclasses.replace(
        plan.sets, nodes=tuple(plan.sets.nodes[i] for i in keep),
        orders=tuple(plan.sets.orders[i] for i in keep))
    return dataclasses.replace(
        plan, observables=tuple(plan.observables[i] for i in keep), sets=sets)
