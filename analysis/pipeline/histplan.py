"""The static plan of soft histograms, systematic variations and channel regions.

Built from the ``histograms``, ``systematics`` and ``likelihood`` sections
(:mod:`analysis.config.likelihood`) and added to the :class:`~analysis.pipeline.plan.Plan`
by :func:`extend`:

* :class:`HistSpec` ``(key, node, edges, region, shift, weight, group)``: one histogram
  state; ``group`` is ``"histograms"`` (a configured histogram at the selection) or
  ``"templates"`` (a channel's nominal template ``CH`` or a variation ``CH:SYST:up``,
  :func:`analysis.config.likelihood.state_key`);
* :class:`Region`: a channel's selection (the selection list plus the channel's own
  entries): its count model and event cuts; region 0 is the selection itself;
* :class:`ShiftSpec`: a column (``C:f`` or ``event:K``) times a factor, before the cuts;
* :class:`WeightSpec`: a per-event factor tree
  (:func:`analysis.config.factors.parse_factor`) times the event weight, or a
  per-object scale factor (:class:`CorrectionSpec`: a column the data layer computes
  with correctionlib).

A channel's extra entries take cut widths after the selection's (their order: channels
as written, entries as written; :func:`extra_widths`), then every histogram with soft
bins (``width > 0``, in the order written) takes one (:attr:`HistSpec.width_index`, its
templates share it), so annealing and ``--set`` treat them as every other width.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp

from analysis.config.factors import factor_branches, parse_factor
from analysis.config.likelihood import shape_systematics, state_key
from analysis.errors import ConfigError, InputError
from analysis.select import exprs
from analysis.select.subsets import MAX_UNCERTAIN

__all__ = [
    "GROUPS",
    "SF_PREFIX",
    "CorrectionSpec",
    "HistSpec",
    "Region",
    "ShiftSpec",
    "WeightSpec",
    "event_sum_collections",
    "extend",
    "extra_widths",
    "factor_values",
    "too_many_uncertain",
]


#: the groups of histogram states (:attr:`HistSpec.group`): the configured histograms,
#: the likelihood's templates
GROUPS = ("histograms", "templates")


@dataclass(frozen=True)
class HistSpec:
    """One histogram state (module docstring)."""

    key: str
    node: exprs.Node
    edges: tuple[float, ...]
    region: int = 0
    shift: int | None = None
    weight: int | None = None
    group: str = "histograms"
    #: the soft bins' width ``widths[width_index]`` (None: hard bins, ``width: 0``)
    width_index: int | None = None
    #: the parameter indices of the interior edges (``trainable_edges: true``; None:
    #: the static ``edges``, which stay the state's structure either way)
    edge_params: tuple[int, ...] | None = None

    def edges_of(self, theta):
        """The edges at ``theta``: ``edges`` with the trainable interior ones read from
        it (a JAX array then), else the static tuple."""
        if self.edge_params is None:
            return self.edges
        inner = jnp.stack([theta[i] for i in self.edge_params])
        return jnp.concatenate([jnp.asarray(self.edges[:1]), inner,
                                jnp.asarray(self.edges[-1:])])


@dataclass(frozen=True)
class Region:
    """A channel's selection: its :class:`~analysis.pipeline.plan.SetPlan` and event cuts."""

    name: str
    sets: Any
    event_cuts: tuple


@dataclass(frozen=True)
class ShiftSpec:
    """The column ``key`` of the padded arrays times ``factor`` (systematic ``name``, ``side``)."""

    name: str
    side: str
    key: str
    factor: float


@dataclass(frozen=True)
class WeightSpec:
    """The event weight times the factor ``tree`` (systematic ``name``, ``side``), or
    with ``sf = (set, field)`` times ``prod_{j in set} field_j`` (a per-object scale
    factor, the column ``field`` of the set's collection: :class:`CorrectionSpec`)."""

    name: str
    side: str
    tree: tuple | None
    sf: tuple[str, str] | None = None


#: the columns of per-object scale factors (computed by analysis.data.columns, not read)
SF_PREFIX = "sf__"


@dataclass(frozen=True)
class CorrectionSpec:
    """Column ``field`` of ``collection``: correction ``key`` of the correctionlib
    file ``path`` of the fields ``inputs`` (``abs_`` prefix: ``|field|``) and the
    string input ``side``."""

    collection: str
    field: str
    path: str
    key: str
    inputs: tuple[str, ...]
    side: str


def extra_widths(config: Any) -> list[float]:
    """The widths of the channels' own entries (after the selection's, in order), then
    those of the histograms with soft bins (``width > 0``, in order)."""
    out = []
    if config.likelihood is not None:
        out = [e.effective_width() for ch in config.likelihood.channels.values()
               for e in ch.selection if e.has_width]
    return out + [float(h.width) for h in config.histograms if h.width > 0]


def _region(config: Any, name: str, ch: Any, build, base, offset: int) -> tuple[Region, list]:
    """The region plan of channel ``name`` (its extra widths from ``offset``) and the
    event keys it reads."""
    entries = list(config.selection.entries or []) + list(ch.selection)
    sub = config.model_copy(update={
        "selection": type(config.selection)(entries=entries),
        "likelihood": None, "histograms": [], "systematics": [],
    })
    plan = build(sub)

    def moved(i: int | None) -> int | None:
        return i if i is None or i < base.n_widths else i - base.n_widths + offset

    sets = dataclasses.replace(plan.sets, count_widths=tuple(moved(i) for i in plan.sets.count_widths))
    cuts = tuple(dataclasses.replace(c, width_index=moved(c.width_index)) for c in plan.event_cuts)
    return Region(name, sets, cuts), list(plan.event_keys)


def extend(config: Any, plan: Any, build) -> Any:
    """``plan`` with the histogram specs, regions, shifts and weight variations of
    ``config`` (``build``: :func:`analysis.pipeline.plan.build_plan`)."""
    if not config.histograms and config.likelihood is None:
        return plan
    src = config.source
    sets = config.objects
    hists: list[HistSpec] = []
    nodes = {}
    # soft bins' widths after the channels' own entries' (extra_widths' order)
    n_channel = 0 if config.likelihood is None else sum(
        e.has_width for ch in config.likelihood.channels.values() for e in ch.selection)
    soft = [h.name for h in config.histograms if h.width > 0]
    width_of = {n: plan.n_widths + n_channel + k for k, n in enumerate(soft)}
    edge_of = {h.name: tuple(plan.param_names.index(n) for n in h.edge_names())
               for h in config.histograms if h.trainable_edges}
    for h in config.histograms:
        nodes[h.name] = (exprs.resolve(exprs.parse(h.x), sets), h.bin_edges())
        hists.append(HistSpec(h.name, *nodes[h.name], width_index=width_of.get(h.name),
                              edge_params=edge_of.get(h.name)))
    event_keys = list(plan.event_keys)
    regions: list[Region] = []
    shifts: list[ShiftSpec] = []
    weights: list[WeightSpec] = []
    read = {c: set(f) for c, f in plan.sets.fields}
    fields = {c: list(f) for c, f in plan.sets.fields}
    corrections: list[CorrectionSpec] = []
    for i, s in enumerate(shape_systematics(config)):
        for side in ("up", "down"):
            if s.type == "shift":
                head, field = s.field.split(".", 1)
                if head in read:
                    if field not in read[head]:
                        raise ConfigError(
                            f"{src}: systematics.{i}.field: {s.field} is not read by the "
                            f"selection, the observables or the histograms (fields of {head}: "
                            f"{', '.join(sorted(read[head])) or 'none'}); shifting it changes "
                            "nothing")
                    key = f"{head}:{field}"
                elif s.field in event_keys:
                    key = f"event:{s.field}"
                else:
                    raise ConfigError(
                        f"{src}: systematics.{i}.field: {s.field} is neither a field of a "
                        f"selected collection ({', '.join(sorted(read)) or 'none'}) nor a "
                        "per-event branch the analysis reads; shifting it changes nothing")
                shifts.append(ShiftSpec(s.name, side, key, float(getattr(s, side))))
            elif s.correction is not None:
                c = s.correction
                coll = plan.sets.collection_of(c.set)
                col = f"{SF_PREFIX}{s.name}__{side}"
                for f in [x[4:] if x.startswith("abs_") else x for x in c.inputs] + [col]:
                    if f not in read.setdefault(coll, set()):
                        read[coll].add(f)
                        fields.setdefault(coll, []).append(f)
                corrections.append(CorrectionSpec(coll, col, config.resolve_path(c.file),
                                                  c.key, tuple(c.inputs), getattr(s, side)))
                weights.append(WeightSpec(s.name, side, None, (c.set, col)))
            else:
                tree = parse_factor(getattr(s, side))
                for key in factor_branches(tree):
                    if key not in event_keys:
                        event_keys.append(key)
                weights.append(WeightSpec(s.name, side, tree))
    if config.likelihood is not None:
        offset = plan.n_widths
        region_of = {}
        for name, ch in config.likelihood.channels.items():
            if not ch.selection:
                region_of[name] = 0
                continue
            region, keys = _region(config, name, ch, build, plan, offset)
            offset += sum(e.has_width for e in ch.selection)
            regions.append(region)
            region_of[name] = len(regions)
            event_keys += [k for k in keys if k not in event_keys]
        n_widths = offset + len(soft)
        shapes = shape_systematics(config)
        for name, ch in config.likelihood.channels.items():
            node, edges = nodes[ch.histogram]
            r = region_of[name]
            soft_w = {"width_index": width_of.get(ch.histogram),
                      "edge_params": edge_of.get(ch.histogram)}
            hists.append(HistSpec(state_key(name), node, edges, r, group="templates", **soft_w))
            si = wi = 0
            for s in shapes:
                for side in ("up", "down"):
                    key = state_key(name, s.name, side)
                    if s.type == "shift":
                        hists.append(HistSpec(key, node, edges, r, shift=si, group="templates",
                                              **soft_w))
                        si += 1
                    else:
                        hists.append(HistSpec(key, node, edges, r, weight=wi, group="templates",
                                              **soft_w))
                        wi += 1
    else:
        n_widths = plan.n_widths + len(soft)
    sets = dataclasses.replace(plan.sets, fields=tuple((c, tuple(f)) for c, f in fields.items()))
    return dataclasses.replace(
        plan, hists=tuple(hists), regions=tuple(regions), shifts=tuple(shifts),
        weights=tuple(weights), event_keys=tuple(event_keys), n_widths=n_widths,
        sets=sets, corrections=tuple(corrections),
    )


_OPS = {"+": jnp.add, "-": jnp.subtract, "*": jnp.multiply, "/": jnp.divide}


def factor_values(tree: tuple, arrays) -> jnp.ndarray | float:
    """The per-event values of a weight factor tree
    (:func:`analysis.config.factors.parse_factor`) from the padded ``arrays``."""
    kind = tree[0]
    if kind == "num":
        return tree[1]
    if kind == "branch":
        return arrays[f"event:{tree[1]}"]
    if kind == "neg":
        return -factor_values(tree[1], arrays)
    return _OPS[kind](factor_values(tree[1], arrays), factor_values(tree[2], arrays))


def too_many_uncertain(spec, collection: str, event: int | None, n: int) -> InputError:
    """The one-line error of an event-sum histogram with ``n`` uncertain objects in
    ``event`` of a chunk (None: not counted, ``n`` objects on the axis)."""
    node = spec.node
    f = node.field or "pt"
    where = (f"event {event} of this chunk has {n} uncertain {collection} objects (pass "
             "probability strictly between 0 and 1)" if event is not None else
             f"this chunk has events with {n} {collection} objects")
    return InputError(
        f"histogram {spec.key!r}: x = {node.text!r}: {where}, more than {MAX_UNCERTAIN} (an "
        "exact soft histogram of an event sum enumerates the subsets of an event's "
        "uncertain objects); add a hard pre-selection (a cut with width: 0, e.g. on pt) "
        f"to the cuts of {node.head!r} or its parent set, or narrow the soft cuts' widths, "
        f"so that fewer objects stay uncertain; or histogram a per-object ({node.head}.{f}) "
        f"or leading-object ({node.head}[0].{f}) observable")


def event_sum_collections(plan) -> tuple[str, ...]:
    """The collections whose subsets an event-sum histogram of ``plan`` enumerates."""
    return tuple(sorted({plan.sets.collection_of(s.node.head) for s in plan.hists
                         if s.node.kind in ("sum", "count")}))
