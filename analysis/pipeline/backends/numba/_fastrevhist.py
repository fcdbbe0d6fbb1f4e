"""Reverse mode's histograms on the numba kernel: the pullback of histogram and template states.

A payload (:func:`analysis.stats.pullback.pullback_payload`) gives per histogram state
``(None, sbar)`` for its ``sumw_flow`` and ``(None, sbar2)`` for its ``sumw2_flow``: the
chunk's share of ``dL/dtheta`` is the gradient of ``sum_b sbar_b sumw_b + sbar2_b
sumw2_b``, a sum over the histogram's entries (an object of a set ``S.f``, ``abs(S.f)``,
or an event for a branch) of its fill weight ``w_i = ev_e p_i`` times a function of its
value (:mod:`analysis.pipeline.backends.numba.kernels._numba_revhist`: per entry
``dL/dw_i``, ``dL/dx_i`` and the trainable edges' ``dL/de_j``, from the soft-bin formula
of :mod:`analysis.stats.softbins`). By the chain rule, as the observables' entries
(:mod:`analysis.pipeline.backends.numba._fastpayload`):

- an object's ``p_j = P(j in S and the region passes)`` (the walk's object weight):
  ``dL/dp_j = ev_e dL/dw_j`` are the objects' weights' cotangents the walk's
  vector-Jacobian product takes (:func:`analysis.pipeline.backends.numba.kernels._numba_sens.pattern_sensitivities`),
  and ``dL/dev_e += sum_j p_j dL/dw_j``;
- a branch's ``p_e = P_e``: ``dL/dP_e += ev_e dL/dw_e``, ``dL/dev_e += P_e dL/dw_e``;
- a value that is a score's column: ``dL/dx`` into the column's cotangent (``abs``:
  times the sign); trainable edges: ``dL/de_j`` into their parameters' gradient.

Each histogram is filled from one selection: a shift side (the whole selection again on
the shifted column and the scores of the shifted inputs,
:func:`analysis.pipeline.scorecols.shifted`, whose columns' cotangents
go to that side's vjps: :func:`analysis.pipeline.scorecols.side_arrays`) and a
region (a channel's count thresholds and event cuts,
:func:`analysis.pipeline.backends.numba._histtables._region_plan`), so the reverse pass
walks each selection the histograms read once (:meth:`Reads.selections`; the nominal
selection's region 0 in the pass's own walk, with the yields and observables) and chains
its cotangents to the cuts as :mod:`analysis.pipeline.backends.numba.fastreverse` does.
A weight variation's factor scales its histogram's bins' cotangents per event (one fill
for the histograms of one set of entries). The value states of every histogram come from
the same fills (the pass's Pullback carries the chunk's states, as the JAX sweep's).

This module pulls back the kinds of :data:`KINDS`; leading objects and candidate tuples
(:mod:`analysis.pipeline.backends.numba._revhistlead`, a subclass of :class:`Reads`) and
event sums (:mod:`analysis.pipeline.backends.numba._revhistsums`) extend it. Per-object
scale factors: no numba rule.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from analysis.pipeline import scorecols
from analysis.pipeline.backends.numba._fastpool import _run_dynamic
from analysis.pipeline.backends.numba._histfills import _factors, fill_key, soft_width
from analysis.pipeline.backends.numba._histtables import _region_plan
from analysis.pipeline.backends.numba.kernels import _numba_revhist
from analysis.pipeline.histplan import GROUPS
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import state_names
from analysis.stats.histogram import Histogram

__all__: list[str] = []  # internal to the numba kernel

#: the histogram kinds whose states the numba reverse pass pulls back
KINDS = ("field", "branch")
#: events per block of the entries' kernel (the blocks on threads; a block's sums apart)
BLOCK = 4096


def _ordered(plan: Plan, group: str) -> list:
    """The specs of ``group`` in the order ``jax.tree_util`` flattens the states (keys sorted)."""
    return sorted((s for s in plan.hists if s.group == group), key=lambda s: s.key)


def bar_key(node, plan: Plan) -> str:
    """The score-column key a node's values would come from: ``"C:field"`` or
    ``"event:branch"``."""
    if node.kind == "field":
        return f"{plan.sets.collection_of(node.head)}:{node.field}"
    return f"event:{node.head}"


def split(plan: Plan, payload: list) -> tuple[list, list] | str:
    """``(rest, hists)``: the payload of the yields and observables (aligned with
    :func:`analysis.pipeline.results.state_names`) and, per histogram spec of ``plan``
    (``plan.hists`` order), its ``(sbar, sbar2)`` (None: not read); or why the payload
    does not fit the plan's states. The states' tree flattens as ``histograms``, the
    observables and yields, then ``templates``."""
    first, last = (_ordered(plan, g) for g in GROUPS)
    n_h, n_t = 2 * len(first), 2 * len(last)
    n = n_h + len(state_names(plan)) + n_t
    if len(payload) != n:
        return f"{len(payload)} payload entries for {n} states"
    cots = {}
    for specs, entries in ((first, payload[:n_h]), (last, payload[len(payload) - n_t:])):
        for i, spec in enumerate(specs):
            pair = entries[2 * i: 2 * i + 2]
            if all(e is None for e in pair):
                continue
            nb = len(spec.edges) + 1
            cots[spec] = tuple(np.zeros(nb) if e is None else
                               np.asarray(e[1], np.float64).reshape(nb) for e in pair)
    return list(payload[n_h: len(payload) - n_t]), [cots.get(s) for s in plan.hists]


def per_event(counts: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(E,)`` each event's sum of its entries' ``weights`` (``counts[e]`` entries of
    event ``e``, in event order)."""
    n_ev = counts.shape[0]
    return np.bincount(np.repeat(np.arange(n_ev), counts), weights=weights, minlength=n_ev)


class _Fill(NamedTuple):
    """One fill: the specs filled from one set of entries and their bins' cotangents."""

    specs: list
    sbar: np.ndarray  # (V, bins)
    sbar2: np.ndarray  # (V, bins)
    # whether the payload reads any of its states; if not, its value states alone and no
    # cotangent anywhere, as the JAX sweep, whose pulled sum skips a None entry (a 0
    # cotangent would meet a NaN event's NaN partials as 0 * NaN)
    read: bool


class Reads:
    """The histogram states a payload reads, per selection ``(shift, region)``, and their
    value states once filled (:attr:`value`, ``{group: {key: Histogram}}``)."""

    def __init__(self, plan: Plan, hists: list) -> None:
        self.plan = plan
        by: dict = {}
        for spec, cot in zip(plan.hists, hists, strict=True):
            by.setdefault((spec.shift, spec.region), {}).setdefault(fill_key(spec), []).append(
                (spec, cot))
        self.fills: dict = {}
        for sel, groups in by.items():
            out = []
            for pairs in groups.values():
                nb = len(pairs[0][0].edges) + 1
                bars = [np.zeros(nb) if c is None else c[0] for _, c in pairs]
                bars2 = [np.zeros(nb) if c is None else c[1] for _, c in pairs]
                out.append(_Fill([s for s, _ in pairs], np.stack(bars), np.stack(bars2),
                                 any(c is not None for _, c in pairs)))
            self.fills[sel] = out
        self.value: dict = {g: {} for g in GROUPS}

    def want_w(self, sel: tuple, tab) -> set:
        """The global set indices whose objects' weights the fills of ``sel`` read."""
        return {tab.gidx[f.specs[0].node.head] for f in self.fills.get(sel, ())
                if f.specs[0].node.kind == "field"}

    def _entries(self, spec, cols, run: Plan, sel) -> tuple:
        """``(x, raw, offsets, set index)`` of the entries of ``spec`` in the selection
        ``sel`` (:func:`analysis.pipeline.backends.numba.fastreverse._selection`); set
        index None: per event."""
        node = spec.node
        if node.kind == "branch":
            raw = np.asarray(cols.events[node.head], np.float64)
            off, gs = np.arange(raw.shape[0] + 1, dtype=np.int64), None
        else:
            coll = run.sets.collection_of(node.head)
            ci = sel.tab.collections.index(coll)
            off, gs = sel.coff[ci], sel.tab.gidx[node.head]
            raw = np.asarray(sel.flats[coll][node.field], np.float64)[: int(off[-1])]
        x = np.ascontiguousarray(np.abs(raw) if node.absolute else raw)
        return x, raw, off, gs

    def _run(self, fill: _Fill, cols, run: Plan, sel, p: np.ndarray | None, theta, widths,
             values: bool, rows: dict, threads: int | None) -> tuple:
        """The kernel on one fill (``p``: the entries' probabilities, None: 1); ``(x, raw,
        off, gs, g, gx, ebar, sumw, sumw2)``."""
        spec = fill.specs[0]
        x, raw, off, gs = self._entries(spec, cols, run, sel)
        p = np.ones(x.shape[0]) if p is None else p
        weight = np.ascontiguousarray(cols.weight, dtype=np.float64)
        factors = np.ascontiguousarray(_factors(self.plan, fill.specs, cols, weight, rows))
        edges = np.array(spec.edges_of(theta), np.float64)
        nv, nb = fill.sbar.shape
        n_blocks = max(1, -(-(off.shape[0] - 1) // BLOCK))
        g, gx = np.zeros(x.shape[0]), np.zeros(x.shape[0])
        ebar = np.zeros((n_blocks, edges.shape[0]))
        sumw, sumw2 = np.zeros((n_blocks, nv, nb)), np.zeros((n_blocks, nv, nb))
        args = (off, x, np.ascontiguousarray(p, np.float64), sel.ev, factors, weight, edges,
                soft_width(spec.width_index, widths), fill.sbar, fill.sbar2, values, BLOCK, g,
                gx, ebar, sumw, sumw2)
        _run_dynamic(_numba_revhist.entry_cotangents, args, n_blocks, threads)
        # the blocks' sums in block order (numpy's pairwise sum: the same bits on any threads)
        return x, raw, off, gs, g, gx, ebar.sum(axis=0), sumw.sum(axis=0), sumw2.sum(axis=0)

    def before_walk(self, key: tuple, cols, run: Plan, sel, theta, widths, *,
                    threads: int | None = None) -> dict:
        """``{global set: dL/d(object weight)}`` of the fills of selection ``key`` that
        read objects: ``ev_e dL/dw_j``, each entry binned where its event's weight is
        not 0 (the object weights come from the walk; where one is 0 its cotangent
        meets a zero derivative: module docstring of
        :mod:`analysis.pipeline.backends.numba.kernels._numba_revhist`)."""
        wbar: dict = {}
        rows: dict = {}
        for fill in self.fills.get(key, ()):
            if fill.specs[0].node.kind != "field" or not fill.read:
                continue
            _, _, off, gs, g, *_ = self._run(fill, cols, run, sel, None, theta, widths, False,
                                             rows, threads)
            wbar[gs] = wbar.get(gs, 0.0) + np.repeat(sel.ev, np.diff(off)) * g
        return wbar

    def after_walk(self, key: tuple, cols, run: Plan, sel, walk, theta, widths, grad: np.ndarray,
                   bars: dict, *, threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(dL/dP_e, dL/dev_e)`` of the fills of selection ``key`` (``walk``: its
        sensitivities' walk, with the objects' weights of :meth:`want_w`); the values'
        and the trainable edges' cotangents into ``bars`` (score columns) and ``grad``
        (one row); the fills' value states into :attr:`value`."""
        n_ev = sel.ev.shape[0]
        pbar, evbar = np.zeros(n_ev), np.zeros(n_ev)
        rows: dict = {}
        for fill in self.fills.get(key, ()):
            node = fill.specs[0].node
            p = walk.pe if node.kind == "branch" else walk.ow[sel.tab.gidx[node.head]]
            done = self._fill(fill, cols, run, sel, p, theta, widths, grad, bars,
                              bar_key(node, run), rows, threads)
            if done is None:
                continue
            off, gs, g = done
            if gs is None:
                pbar += sel.ev * g
                evbar += walk.pe * g
            else:
                evbar += per_event(np.diff(off), p * g)
        return pbar, evbar

    def _fill(self, fill: _Fill, cols, run: Plan, sel, p: np.ndarray, theta, widths,
              grad: np.ndarray, bars: dict, bkey: str | None, rows: dict,
              threads: int | None) -> tuple | None:
        """:meth:`_run` with the entries' probabilities ``p``: the value states into
        :attr:`value`; read (:class:`_Fill`), the values' cotangents into ``bars[bkey]``
        (a score's column, ``d|v|/dv = sign(v)``), the trainable edges' into ``grad`` and
        ``(off, gs, g)`` (the entries' offsets, set, ``dL/dw``) returned, else None."""
        _, raw, off, gs, g, gx, ebar, sumw, sumw2 = self._run(
            fill, cols, run, sel, p, theta, widths, True, rows, threads)
        for v, s in enumerate(fill.specs):
            self.value[s.group][s.key] = Histogram(s.edges, sumw[v], sumw2[v])
        if not fill.read:
            return None
        if bkey in bars:
            bars[bkey][:, : gx.size] += gx * np.sign(raw) if fill.specs[0].node.absolute else gx
        for j, par in enumerate(fill.specs[0].edge_params or (), start=1):
            grad[:, par] += ebar[j]
        return off, gs, g

    def selections(self, cols, run: Plan):
        """Every selection but the nominal region 0 (module docstring), as ``(key,
        columns, plan, shifted column, factor)``: its shift side's columns (the shifted
        column None for the nominal ones) and its region's plan (without scores)."""
        for shift, region in [k for k in self.fills if k != (None, 0)]:
            column, factor = None, 1.0
            side = cols
            if shift is not None:
                column, factor = self.plan.shifts[shift].key, self.plan.shifts[shift].factor
                side = scorecols.shifted(cols, column, factor)
            yield (shift, region), side, _region_plan(run, region), column, factor
