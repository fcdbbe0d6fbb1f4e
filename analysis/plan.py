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
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from analysis.config import Config
from analysis.errors import ConfigError
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
    "build_plan",
    "initial_widths",
    "parse_expr",
]

# From the one registry of statistics (one variable: of Moments; two: of CoMoments).
UNIVARIATE_STATS = registry.UNIVARIATE
BIVARIATE_STATS = registry.BIVARIATE

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


@dataclass(frozen=True)
class ObjectCut:
    """Soft cut on a field of the selection collection: ``field OP threshold`` per object.

    ``absolute`` cuts ``|field|``; ``greater`` is True for ``>``/``>=``; ``inclusive``
    for ``>=``/``<=`` (matters only for the hard step, width 0). The threshold is the
    parameter at index ``param`` of the full parameter vector, or the constant
    ``value``; its sigmoid width is ``widths[width_index]``.
    """

    field: str
    absolute: bool
    greater: bool  # ">" / ">=": pass when value exceeds the threshold
    inclusive: bool
    param: int | None  # index into the full parameter vector
    value: float | None
    width_index: int


@dataclass(frozen=True)
class EventVarCut:
    """Soft cut on a per-event branch (``expr``, e.g. ``MET.pt``): ``expr OP threshold``.

    Fields as :class:`ObjectCut`; the event weight is multiplied by the pass probability.
    """

    expr: Expr
    greater: bool
    inclusive: bool
    param: int | None
    value: float | None
    width_index: int


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

    @property
    def trainable_names(self) -> tuple[str, ...]:
        """Names of the trainable parameters, in ``trainable`` order."""
        return tuple(self.param_names[i] for i in self.trainable)


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


def build_plan(config: Config) -> Plan:
    """Turn a validated :class:`~analysis.config.Config` into a :class:`Plan`."""
    names = tuple(config.parameters)
    trainable = tuple(i for i, n in enumerate(names) if config.parameters[n].trainable)
    integer = tuple(config.parameters[n].integer for n in names)
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
    for cut in sel.objects.cuts if sel.objects is not None else []:
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
        uni = tuple(s for s in obs.stats if s in UNIVARIATE_STATS)
        bi = tuple(s for s in obs.stats if s in BIVARIATE_STATS)
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
    sel = config.selection
    widths = [c.width for c in (sel.objects.cuts if sel.objects is not None else [])]
    widths += [e.effective_width() for e in sel.events]
    return widths
