"""The static plan of an analysis: which columns to read and what to compute.

A :class:`Plan` is built once from the validated config. It is a frozen, hashable
description (cuts, observables, parameter order), so it can be a static argument of
``jax.jit`` and is cheap to pickle to coffea workers. Parameter *values* and cut
widths are not part of it: they change every optimisation step without recompiling.

Expression language for observables and event cuts (see the README):

- ``C.f`` with ``C`` the selection collection: one value per selected object,
  weighted by event weight x soft event selection x soft object selection;
  ``abs(C.f)`` the same with ``|f|``;
- ``sum(C.f)``: per event, the soft-selected sum ``sum_j w_j f_j`` over objects;
  ``count(C)``: per event, the soft number of selected objects ``sum_j w_j``;
- anything else (``MET.pt``, ``MET_pt``, ``genWeight``, ``abs(MET.phi)``): a
  per-event branch, weighted by event weight x soft event selection.

With a top-level ``objects:`` (several object sets, a ``selection`` list of joint
counts and branch cuts, indexed and 4-vector observables; grammar in
:mod:`analysis.select.exprs`) the plan carries a :class:`SetPlan` in ``sets`` and the
single-collection fields are empty; :mod:`analysis.pipeline.setkernel` computes it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from analysis.config.loader import Config
from analysis.config.score import SCORE_PREFIX
from analysis.errors import ConfigError
from analysis.pipeline.score import ScoreSpec, score_specs
from analysis.select import exprs, functions
from analysis.select.objects import Count, CountModel, ObjectSet, required_cap
from analysis.stats import registry

__all__ = [
    "BIVARIATE_STATS",
    "UNIVARIATE_STATS",
    "CountCut",
    "EventVarCut",
    "Expr",
    "ObjectCut",
    "Observable",
    "Plan",
    "SetPlan",
    "SetSpec",
    "build_plan",
    "initial_widths",
    "parse_expr",
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

_EXPR = re.compile(
    r"^(?:(?P<fn>sum|count|abs)\()?(?P<a>[A-Za-z_][A-Za-z0-9_]*)(?:\.(?P<b>[A-Za-z_][A-Za-z0-9_]*))?\)?$"
)


@dataclass(frozen=True)
class Expr:
    """A parsed observable expression.

    ``level`` is ``"object"`` (one value per object of the selection collection)
    or ``"event"`` (one value per event). ``kind`` is ``"field"``, ``"sum"``,
    ``"count"`` or ``"branch"``; ``key`` names the column that is read.
    """

    text: str
    level: str
    kind: str
    key: str | None
    absolute: bool = False


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
    """Soft cut on a field of the selection collection: ``field OP threshold`` per object.

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
    """Soft cut on a per-event branch (``expr``, e.g. ``MET.pt``): ``expr OP threshold``.

    Fields as :class:`ObjectCut`; the event weight is multiplied by the pass probability.
    """

    expr: Expr
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
class CountCut:
    """Soft "number of selected objects OP N" (Poisson-binomial); the width smooths
    a non-integer N between integers."""

    op: str
    param: int | None
    value: float | None
    width_index: int


@dataclass(frozen=True)
class Observable:
    """An observable: expression ``x`` (and ``y`` for statistics of two variables) and the
    statistics asked for, split by arity (names of :mod:`analysis.stats.registry`)."""

    name: str
    x: Expr
    y: Expr | None
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
    by ``width_index`` (object cuts, then event cuts, ``n_widths`` in all). The columns
    to read are ``collection``'s ``object_fields`` and the per-event ``event_keys``.
    """

    param_names: tuple[str, ...]
    trainable: tuple[int, ...]  # indices of trainable parameters in param_names
    integer: tuple[bool, ...]
    collection: str | None
    object_fields: tuple[str, ...]  # fields of the collection to read
    event_keys: tuple[str, ...]  # per-event branches to read
    object_cuts: tuple[ObjectCut, ...]
    event_cuts: tuple[EventVarCut, ...]
    count_cuts: tuple[CountCut, ...]
    count_cap: int  # states of the Poisson-binomial recursion: P(K = 0..cap-1), P(K >= cap)
    observables: tuple[Observable, ...]
    n_widths: int
    sets: SetPlan | None = None  # the object-set form (``objects:``), else None
    scores: tuple[ScoreSpec, ...] = ()  # learned scores (analysis.pipeline.score)

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
    """The object-set form of a plan (``objects:`` configs; see :mod:`analysis.pipeline.setkernel`).

    ``model``: the static count model; ``thresholds``: ``(param, value)`` of each of its
    counts; ``fields``: ``((collection, (field, ...)), ...)`` to read; ``nodes``: the
    parsed ``(x, y)`` of each observable, in plan order; ``orders``: power-sum order of
    each observable (the highest ``order`` its statistics declare in
    :mod:`analysis.stats.registry`, at least 2); ``max_objects``: ``((collection,
    cap, set), ...)`` for the collections with a configured cap (the smallest over its
    root sets, and the set giving it); ``count_widths``: the width index of each
    count's smoothed integer step (``None``: a fixed integer value, exact without one).
    """

    sets: tuple[SetSpec, ...]
    model: CountModel
    thresholds: tuple[tuple[int | None, float | None], ...]
    fields: tuple[tuple[str, tuple[str, ...]], ...]
    nodes: tuple[tuple[exprs.Node, exprs.Node | None], ...]
    orders: tuple[int, ...]
    max_objects: tuple[tuple[str, int, str], ...] = ()
    count_widths: tuple[int | None, ...] = ()

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


def _build_set_plan(config: Config, names, trainable, integer) -> Plan:
    """:func:`build_plan` of the object-set form (config already cross-checked)."""
    src = config.source
    cfg_sets = config.objects

    def collection(name: str) -> str:
        s = cfg_sets[name]
        return s.collection if s.collection is not None else collection(s.from_)

    n_widths = 0
    specs = []
    fields: dict[str, list[str]] = {}

    def need(c: str, f: str) -> None:
        fields.setdefault(c, [])
        if f.startswith(SCORE_PREFIX):  # computed by the kernel, not read
            return
        if f not in fields[c]:
            fields[c].append(f)

    for name, s in cfg_sets.items():
        c = collection(name)
        cuts = []
        for cut in s.cuts:
            oc = _object_cut(cut, names, n_widths)
            n_widths += 1
            need(c, oc.field)
            cuts.append(oc)
        need(c, s.rank_by)
        specs.append(SetSpec(name, c, s.from_, tuple(cuts), s.rank_by))
    counts, thresholds, event_cuts, event_keys = [], [], [], []
    count_widths: list[int | None] = []
    for entry in config.selection.entries or []:
        if entry.count is not None:
            param, value = _threshold(entry.param, entry.value, names)
            if param is not None:  # a trainable n stays within its bounds
                top = int(math.ceil(config.parameters[entry.param].bounds[1]))
            else:
                top = int(value)
            counts.append(Count(entry.sets, entry.op, required_cap(entry.op, top)))
            thresholds.append((param, value))
            # A trainable threshold's smoothed integer step has a width (annealed like
            # the others); a fixed integer value is exact without one.
            count_widths.append(n_widths if param is not None else None)
            n_widths += param is not None
        else:
            key = exprs.resolve(exprs.parse(entry.var), set()).head
            if key not in event_keys and not key.startswith(SCORE_PREFIX):
                event_keys.append(key)
            expr = Expr(entry.var, "event", "branch", key)
            event_cuts.append(EventVarCut(expr, **_cut_args(entry, names, n_widths)))
            n_widths += 1
    try:
        model = CountModel(
            tuple(ObjectSet(s.name, s.collection, s.parent) for s in specs), tuple(counts)
        )
    except ConfigError as err:
        raise ConfigError(f"{src}: objects: {err}") from None
    observables, nodes, orders = [], [], []
    for obs in config.observables:
        pair = []
        for key in ("x", "y"):
            text = getattr(obs, key)
            if text is None:
                pair.append(None)
                continue
            node = exprs.resolve(exprs.parse(text), cfg_sets)
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
            pair.append(node)
        nodes.append(tuple(pair))
        uni, bi = _split_stats(obs.stats)
        # the moment order the statistics declare (at least 2: M2 is always there)
        orders.append(max(2, registry.moment_order(uni)))
        x = pair[0]
        level = "object" if x.level != "event" else "event"
        observables.append(Observable(
            obs.name, Expr(obs.x, level, x.kind, x.field),
            None if obs.y is None else Expr(obs.y, level, pair[1].kind, pair[1].field), uni, bi,
        ))
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
        tuple((c, tuple(f)) for c, f in fields.items()), tuple(nodes), tuple(orders),
        max_objects=tuple((c, cap, name) for c, (cap, name) in caps.items()),
        count_widths=tuple(count_widths),
    )
    return Plan(
        param_names=names, trainable=trainable, integer=integer, collection=None,
        object_fields=(), event_keys=tuple(event_keys), object_cuts=(),
        event_cuts=tuple(event_cuts), count_cuts=(), count_cap=1,
        observables=tuple(observables), n_widths=n_widths, sets=set_plan, scores=scores,
    )


def parse_expr(text: str, collection: str | None, where: str) -> Expr:
    """Parse ``text`` (see the module docstring); ``where`` names the config key for errors."""
    m = _EXPR.match(text.replace(" ", ""))
    if m is None:
        raise ConfigError(f"{where}: cannot parse expression {text!r}")
    fn, a, b = m.group("fn"), m.group("a"), m.group("b")
    if fn in ("sum", "count"):
        if collection is None or a != collection:
            raise ConfigError(
                f"{where}: {fn}() needs the selection collection "
                f"({collection or 'selection.objects.collection is not set'}), got {a!r}"
            )
        if fn == "count":
            if b is not None:
                raise ConfigError(
                    f"{where}: count() takes a collection, e.g. count({a}), got {text!r}"
                )
            return Expr(text, "event", "count", None)
        if b is None:
            raise ConfigError(f"{where}: sum() takes a field, e.g. sum({a}.pt), got {text!r}")
        return Expr(text, "event", "sum", b)
    absolute = fn == "abs"
    if collection is not None and a == collection:
        if b is None:
            raise ConfigError(f"{where}: {text!r} names the collection; give a field, e.g. {a}.pt")
        return Expr(text, "object", "field", b, absolute)
    return Expr(text, "event", "branch", a if b is None else f"{a}.{b}", absolute)


def _threshold(cfg_param: str | None, cfg_value: float | None, names: tuple[str, ...]):
    return (names.index(cfg_param), None) if cfg_param is not None else (None, float(cfg_value))


def _threshold_kind(cut, where: str) -> None:
    """The single-collection form has threshold cuts only (its kernels know no kinds)."""
    if cut.op not in (">", ">=", "<", "<="):
        raise ConfigError(f"{where}: a '{cut.op}' cut needs the object-set form "
                          "(top-level 'objects:' and a 'selection' list)")


def build_plan(config: Config) -> Plan:
    """Turn a validated :class:`~analysis.config.loader.Config` into a :class:`Plan`."""
    score_params = config.score_parameters()  # after the declared ones
    names = tuple(config.parameters) + tuple(n for n, _, _ in score_params)
    trainable = tuple(i for i, n in enumerate(config.parameters)
                      if config.parameters[n].trainable)
    trainable += tuple(len(config.parameters) + i for i, (_, _, t) in enumerate(score_params) if t)
    integer = tuple(config.parameters[n].integer for n in config.parameters)
    integer += (False,) * len(score_params)
    if config.objects:
        return _build_set_plan(config, names, trainable, integer)
    sel = config.selection
    collection = sel.objects.collection if sel.objects is not None else None
    object_fields: list[str] = []
    event_keys: list[str] = []

    def need(expr: Expr) -> None:
        if expr.level == "object" or expr.kind == "sum":
            if expr.key not in object_fields:
                object_fields.append(expr.key)
        elif expr.kind == "branch" and expr.key not in event_keys:
            event_keys.append(expr.key)

    object_cuts = []
    n_widths = 0
    for i, cut in enumerate(sel.objects.cuts if sel.objects is not None else []):
        _threshold_kind(cut, f"{config.source}: selection.objects.cuts.{i}.op")
        absolute = cut.var.startswith("abs_")
        field = cut.var[4:] if absolute else cut.var
        if field not in object_fields:
            object_fields.append(field)
        param, value = _threshold(cut.param, cut.value, names)
        object_cuts.append(
            ObjectCut(
                field,
                absolute,
                cut.op in (">", ">="),
                cut.op in (">=", "<="),
                param,
                value,
                n_widths,
            )
        )
        n_widths += 1
    event_cuts = []
    count_cuts = []
    cap = 1
    for i, ev in enumerate(sel.events):
        _threshold_kind(ev, f"{config.source}: selection.events.{i}.op")
        param, value = _threshold(ev.param, ev.value, names)
        if ev.count is not None:
            if collection is None or ev.count != collection:
                raise ConfigError(
                    f"{config.source}: selection.events.{i}.count: counts objects of the selection "
                    f"collection ({collection or 'selection.objects is not set'}), got {ev.count!r}"
                )
            if param is not None:
                p = config.parameters[names[param]]
                top = max(p.init, p.bounds[1] if p.bounds else p.init)
            else:
                top = value
            # ">" N is ">=" N + 1, and a non-integer N interpolates up to ceil(N).
            cap = max(cap, int(math.floor(top)) + 2)
            count_cuts.append(CountCut(ev.op, param, value, n_widths))
            n_widths += 1
        else:
            expr = parse_expr(ev.var, collection, f"{config.source}: selection.events.{i}.var")
            if expr.level != "event" or expr.kind != "branch":
                raise ConfigError(
                    f"{config.source}: selection.events.{i}.var: needs a per-event branch "
                    f"(e.g. MET.pt), got {ev.var!r}"
                )
            need(expr)
            event_cuts.append(
                EventVarCut(
                    expr, ev.op in (">", ">="), ev.op in (">=", "<="), param, value, n_widths
                )
            )
            n_widths += 1

    observables = []
    for i, obs in enumerate(config.observables):
        where = f"{config.source}: observables.{i}"
        x = parse_expr(obs.x, collection, f"{where}.x")
        need(x)
        y = None
        if obs.y is not None:
            y = parse_expr(obs.y, collection, f"{where}.y")
            need(y)
            if y.level != x.level:
                raise ConfigError(
                    f"{where}.y: {obs.y!r} is per {y.level} but x {obs.x!r} is per {x.level}; "
                    "both must be per object or both per event"
                )
        uni, bi = _split_stats(obs.stats)
        observables.append(Observable(obs.name, x, y, uni, bi))

    return Plan(
        param_names=names,
        trainable=trainable,
        integer=integer,
        collection=collection,
        object_fields=tuple(object_fields),
        event_keys=tuple(event_keys),
        object_cuts=tuple(object_cuts),
        event_cuts=tuple(event_cuts),
        count_cuts=tuple(count_cuts),
        count_cap=cap,
        observables=tuple(observables),
        n_widths=n_widths,
    )


def initial_widths(config: Config) -> list[float]:
    """The configured cut widths, in the plan's width order (object cuts, then event cuts)."""
    if config.objects:
        widths = [c.width for s in config.objects.values() for c in s.cuts]
        return widths + [
            e.effective_width() for e in config.selection.entries or []
            if e.count is None or e.param is not None
        ]
    sel = config.selection
    widths = [c.width for c in (sel.objects.cuts if sel.objects is not None else [])]
    widths += [e.effective_width() for e in sel.events]
    return widths
