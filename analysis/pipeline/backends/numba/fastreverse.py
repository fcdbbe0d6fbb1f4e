"""Reverse mode's second pass on the numba kernel: a chunk's ``dL/dtheta`` from sensitivities.

For a pullback payload (:mod:`analysis.stats.pullback`) that reads only the selected
yields ``Y = sum_e y_e`` and ``Y2 = sum_e y_e^2`` (``y_e = ev_e P_e``: the event weight
times the soft branch cuts, times the event's pass probability), the chunk's share of the
gradient is that of ``L_c = a1 Y + a2 Y2`` (``a1``, ``a2``: the merged yields'
cotangents), by the chain rule on values only:

- ``dL_c/dy_e = a1 + 2 a2 y_e``, so ``dL_c/dP_e = ev_e dL_c/dy_e`` and
  ``dL_c/dev_e = P_e dL_c/dy_e``;
- per object and set, ``dP_e/dq_js`` (``q_js``: the product of set ``s``'s own cuts;
  one collection with one set: the chain, :func:`analysis.select.chainwalk.sens_walk`;
  any other count model: :mod:`analysis.pipeline.backends.numba._fastsens`), and
  ``dq_js/dt`` = the other cuts' product times the soft cut's derivative in its
  threshold (``ds/dx = -ds/dt`` in its value: a learned score's column's cotangent,
  then the network's vjp, :func:`analysis.pipeline.scorecols.score_columns`);
- per event, ``dev_e/dt`` likewise; trainable count thresholds:
  ``dP_e/dtheta = sum_k F_n[k] df[k]/dtheta``.

What else a payload reads adds its cotangents to ``dL/dP_e``, ``dL/dev_e``, the sets'
own probabilities and the count thresholds: observables of kinds ``S.f`` and branches
(:mod:`~analysis.pipeline.backends.numba._fastpayload`, an object's weight through the
walk's vector-Jacobian product), event sums and indexed observables
(:mod:`~analysis.pipeline.backends.numba._revobs`), histograms in every selection they
are filled from (:mod:`~analysis.pipeline.backends.numba._fastrevhist`,
:mod:`~analysis.pipeline.backends.numba._revhistlead`,
:mod:`~analysis.pipeline.backends.numba._revhistsums`).

One walk per event for any number of parameters, which also gives the value states
where they read only pass probabilities and objects' weights (:func:`_value_states`);
otherwise they come from :func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns`.
Exact: the derivative of ``jax.grad`` of the JAX kernel
(:mod:`analysis.pipeline.backends.jax.reverse`, the reference; tests compare them); the
numba rules (:mod:`analysis.pipeline.backends.numba.rules`) say which plans it serves.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from typing import Any

import numpy as np

from analysis.pipeline import scorecols
from analysis.pipeline.backends.numba import (
    _fastpayload,
    _fastrevhist,
    _fastsens,
    _revhistlead,
    _revobs,
    fastkernel,
)
from analysis.pipeline.backends.numba._fastpool import yield_sums
from analysis.pipeline.backends.numba._fasttables import (
    _tables,
    chain,
    offsets,
    one_sided,
    walk_table,
)
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import DatasetState, state_tree
from analysis.select import chainwalk
from analysis.stats.derive import Pullback

__all__ = ["chunk_pullback", "chunk_yield_gradients"]


def _soft(x: np.ndarray, cut, theta, widths, absolute: bool = False
          ) -> tuple[np.ndarray, np.ndarray]:
    """``(s, ds/dt)`` of a threshold cut over ``x`` (:func:`analysis.pipeline.backends.numba.kernels._numba_dp.soft_array`)."""
    return fastkernel._numba_dp.soft_array(x, fastkernel._value(theta, cut.param, cut.value),
                                           widths[cut.width_index], cut.greater, cut.inclusive,
                                           absolute)


def _others(s: list[np.ndarray], c: int, base: np.ndarray) -> np.ndarray:
    """``base`` times every factor of ``s`` but the ``c``-th (no division: ``s`` may be 0)."""
    out = base.copy()
    for i, si in enumerate(s):
        if i != c:
            out *= si
    return out


def _one_set_walk(sel: _Selection, want_w: bool, threads: int | None) -> _fastsens.Walk:
    """The sensitivities' walk of one collection with one set: the chain
    (:func:`analysis.select.chainwalk.sens_walk`)."""
    tgt, f, df = sel.table
    states = chain(tgt[0, 1])  # the chain's states (one without counts)
    f, df = np.ascontiguousarray(f[states]), np.ascontiguousarray(df[states])
    coff = sel.coff[0]
    n_ev, n_obj = coff.shape[0] - 1, int(coff[-1])
    pe, dq = np.zeros(n_ev), np.zeros(n_obj)
    fn = np.zeros((n_ev, f.shape[0]))
    ow = np.zeros(n_obj if want_w else 0)
    if n_ev:
        args = (coff, np.ascontiguousarray(sel.q_of[0]), f, want_w, max(sel.max_seq, 1),
                fastkernel.BLOCK, pe, dq, fn, ow)
        fastkernel._run_blocks(chainwalk.sens_walk, args,
                               max(1, -(-n_ev // fastkernel.BLOCK)), threads)
    return _fastsens.Walk(pe, {0: dq}, {0: ow} if want_w else {}, fn @ df)


def _value_states(cols: ChunkColumns, plan: Plan, off_of: dict, flats: dict, ev: np.ndarray,
                  pe: np.ndarray, wo_of: dict, threads: int | None) -> dict:
    """The chunk's value states (yields and observables of kinds ``S.f`` and branches) from
    the sensitivities' walk: the event weights ``ev``, pass probabilities ``pe`` (``(E,)``)
    and objects' weights ``wo_of[set]`` (``(N_c,)``; collection ``c``'s offsets
    ``off_of[c]``, fields ``flats[c]``), in lane 0 of
    :func:`analysis.pipeline.backends.numba.fastkernel.observable_states`' inputs: the
    floats of ``evaluate_columns`` at ``order=0`` (without its walk, a fifth of the pass),
    but within an ulp or two for objects' weights that trainable count thresholds (more
    states on the chain) or the general model (summed over patterns here) add otherwise."""
    lanes = fastkernel._numba_dp.LANES

    def lane0(a: np.ndarray) -> np.ndarray:
        out = np.zeros((a.shape[0], lanes))
        out[:, 0] = a
        return out

    ev8, pe8 = lane0(ev), lane0(pe)
    ys = yield_sums(ev8, pe8, 1, fastkernel.BLOCK, threads)
    value = state_tree(np.array(ys[0, 0], dtype=np.float64),
                       np.array(ys[1, 0], dtype=np.float64), {})
    value["observables"], _ = fastkernel.observable_states(
        cols, plan, off_of=off_of, flats=flats, pe=pe8,
        wo_of={s: lane0(w) for s, w in wo_of.items()}, sa_of={}, ev=ev8, cands={}, np1=1,
        threads=threads)
    return value


@dataclasses.dataclass
class _Selection:
    """One selection of a chunk (its columns, a region's cuts), ready for the walk, with
    the tables its walk and every share of its cotangents read (each made once)."""

    tab: Any  # the plan's tables (_fasttables._Tables)
    coff: np.ndarray  # (C, E + 1) object offsets per collection
    base: np.ndarray  # (C + 1,) each collection's first global object index
    flats: dict  # collection -> its flat fields
    max_seq: int
    sets: list  # per set (global index): (collection index, cuts, raw values, (s, ds/dt))
    q_of: dict  # global set index -> (N_c,) the product of the set's own cuts
    ecuts: tuple  # the event cuts (one-sided)
    esoft: list  # per event cut: (s, ds/dt)
    w: np.ndarray  # (E,) the event weights
    ev: np.ndarray  # (E,) times the soft event cuts
    counts_tr: tuple  # the trainable count thresholds' parameters
    table: tuple  # the walk's (tgt, f, df) (_fasttables.walk_table)

    @functools.cached_property
    def ins(self) -> _fastsens.Inputs:
        """The walk's tables and every object's pattern probabilities
        (:func:`analysis.pipeline.backends.numba._fastsens.inputs`; the chain reads none)."""
        return _fastsens.inputs(self.tab, self.table, self.base, self.q_of)

    @functools.cached_property
    def zero_tangents(self) -> tuple[np.ndarray, np.ndarray]:
        """``(pd_all, df)``: zero tangents ``(N, P, LANES)`` and ``(S, LANES)`` for the
        forward kernels run on values only (event sums' bins, leading candidates)."""
        lanes = fastkernel._numba_dp.LANES
        return (np.zeros(self.ins.pv_all.shape + (lanes,)),
                np.zeros((self.ins.f.shape[0], lanes)))


def _selection(cols: ChunkColumns, run: Plan, theta: np.ndarray, widths: np.ndarray
               ) -> _Selection:
    """The selection of ``run`` (without scores) on ``cols``: per collection offsets and
    fields, per set its own soft cuts, the event weights, the walk's tables."""
    tab = _tables(run)
    coff, base, flats, max_seq = offsets(cols, tab.collections, run.sets)
    sets = []  # per set (global index): (collection index, cuts, raw values, (s, ds/dt))
    q_of = {}
    for gs, c in enumerate(tab.set_coll):
        ci = tab.collections.index(c)
        n_obj = int(coff[ci, -1])
        cuts = tab.set_cuts[gs]
        raw = [np.asarray(flats[c].get(x.field, np.zeros(n_obj)), dtype=np.float64)[:n_obj]
               for x in cuts]
        soft = [_soft(x, cut, theta, widths, cut.absolute) for cut, x in zip(cuts, raw,
                                                                            strict=True)]
        sets.append((ci, cuts, raw, soft))
        q_of[gs] = _others([s for s, _ in soft], -1, np.ones(n_obj))
    ecuts = one_sided(run.event_cuts)
    esoft = [_soft(np.asarray(cols.events[c.key], dtype=np.float64), c, theta, widths) for c in ecuts]
    w = np.asarray(cols.weight, dtype=np.float64)
    ev = _others([s for s, _ in esoft], -1, w)
    counts_tr = tuple(p for p, _ in run.sets.thresholds if p is not None and p in run.trainable)
    return _Selection(tab, coff, base, flats, max_seq, sets, q_of, ecuts, esoft, w, ev,
                      counts_tr, walk_table(tab, run.sets, theta, widths, counts_tr))


def _walk(sel: _Selection, want_w: set, wbar: dict | None, threads: int | None
          ) -> _fastsens.Walk:
    """The sensitivities' walk of a selection: the chain's for one collection with one
    set, else the general one (with ``wbar``, the objects' weights' cotangents: its
    vector-Jacobian product too)."""
    if sel.tab.one_set and wbar is None:
        return _one_set_walk(sel, bool(want_w), threads)
    # any count model, or the walk's vector-Jacobian product (observables read)
    return _fastsens.walk(sel.coff, sel.ins, want_w, max_seq=sel.max_seq,
                          block=fastkernel.BLOCK, threads=threads, wbar=wbar)


def _to_cuts(dl: np.ndarray, cuts, soft: list, base: np.ndarray, keys: list,
             raw: list | None, grad: np.ndarray, bars: dict) -> None:
    """``dl`` (``(R, n)``), the cotangents of ``base`` times the cuts' soft values ``soft``
    (per cut ``(s, ds/dt)``), chained to each cut's threshold (``grad``) and to its
    values' score column ``bars[keys[c]]`` (``ds/dx = -ds/dt``; an ``abs`` cut of the
    values ``raw``: times their sign)."""
    for c, cut in enumerate(cuts):
        g = dl * (_others([s for s, _ in soft], c, base) * soft[c][1])  # dL/dt
        if cut.param is not None:
            grad[:, cut.param] += g.sum(axis=1)
        if keys[c] in bars:
            bars[keys[c]][:, : base.shape[0]] -= (g * np.sign(raw[c]) if raw is not None
                                                  and cut.absolute else g)


def _chain(sel: _Selection, walk: _fastsens.Walk, dp: np.ndarray, dev: np.ndarray,
           grad: np.ndarray, bars: dict, by_walks=None) -> None:
    """``dL/dP_e`` (``dp``) and ``dL/dev_e`` (``dev``, both ``(R, E)``) and the walk's
    objects' weights' share (and ``by_walks``' ``dL/dq_js`` and ``dL/dthreshold``: the
    event sums' and indexed observables' walks, :func:`analysis.pipeline.backends.numba._revobs.pull`),
    chained to the cuts' thresholds and the count thresholds (added to ``grad``,
    ``(R, P)``) and to the score columns (``bars``)."""
    _to_cuts(dev, sel.ecuts, sel.esoft, sel.w, [f"event:{c.key}" for c in sel.ecuts], None,
             grad, bars)
    for gs, (ci, cuts, raw, soft) in enumerate(sel.sets):
        dlq = np.repeat(dp, np.diff(sel.coff[ci]), axis=1) * walk.dq[gs]  # dL/dq_j
        if walk.dq_w is not None:  # the objects' weights' share (the walk's vjp)
            dlq += walk.dq_w[gs]
        if by_walks is not None:
            dlq += by_walks.dq[gs]
        coll = sel.tab.collections[ci]
        _to_cuts(dlq, cuts, soft, np.ones(dlq.shape[1]), [f"{coll}:{c.field}" for c in cuts],
                 raw, grad, bars)
    if sel.counts_tr:
        g = dp @ walk.dfe  # (R, K)
        if walk.dfw is not None:
            g += walk.dfw.sum(axis=0)
        if by_walks is not None:
            g += by_walks.dcount
        for k, p in enumerate(sel.counts_tr):
            grad[:, p] += g[:, k]


def _shares(cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, cots, *,
            payload: list | None = None, threads: int | None = None,
            trace: Counter | None = None):
    """``(value, grads)``: the chunk's value states and ``grads[r] = d(a1_r Y + a2_r Y2)/dtheta``
    over the full parameter vector for each row ``(a1_r, a2_r)`` of ``cots`` ((R, 2));
    ``payload`` given: ``cots`` from it (one row; with the observable and histogram
    states it reads, module docstring). ``trace``:
    counts the walks of the selection (``trace[None, 0]``: one, two with event sums or
    indexed observables; with histograms, each other selection they read as
    ``trace[side, region]``)."""
    theta = np.asarray(theta, dtype=np.float64).reshape(-1)
    widths = np.asarray(widths, dtype=np.float64).reshape(plan.n_widths)
    run = scorecols.bare(plan)
    cols, vjps = scorecols.score_columns(cols, plan, theta, vjp=True)
    # the value states from the sensitivities' walk where it gives what they read
    own = any(o.x.kind not in ("field", "branch") for o in run.observables)
    keep: list = []  # the value walk (its event sums' moments, indexed candidates)
    value = (fastkernel.evaluate_columns(cols, run, theta, widths, order=0, threads=threads,
                                         trace=trace, keep=keep)[0] if own else None)
    reads: list = []  # the observable states the payload reads
    hist = None  # the histogram states (_fastrevhist)
    if payload is not None:  # one the numba rules serve (they checked it)
        parsed = _fastpayload.parse(run, payload)
        if isinstance(parsed, str):
            raise ValueError("the numba reverse pass does not pull back a state the "
                             f"objective reads: {parsed}")
        cot, reads = parsed
        cots = [cot]
        if run.hists:
            hist = _revhistlead.Reads(run, _fastrevhist.split(run, payload)[1])
    elif run.hists:
        raise ValueError("the numba yield gradients read no histograms (a pullback does)")
    cots = np.asarray(cots, dtype=np.float64).reshape(-1, 2)
    n_rows = cots.shape[0]
    grad = np.zeros((n_rows, theta.size))
    # the score columns' cotangents: the nominal ones, and those of the shift sides
    bars = {e.key: np.zeros((n_rows, e.rows)) for e in vjps}
    sel = _selection(cols, run, theta, widths)
    tab, coff, flats, ev = sel.tab, sel.coff, sel.flats, sel.ev

    fields = {o.x.head for o in run.observables if o.x.kind == "field"} if value is None else set()
    want_w = {tab.gidx[s] for s in fields} | {
        tab.gidx[run.observables[r.index].x.head] for r in reads
        if run.observables[r.index].x.kind == "field"}
    if trace is not None:
        trace[None, 0] += 1
    walked = [r for r in reads if run.observables[r.index].x.kind in _revobs.KINDS]
    entries = [r for r in reads if run.observables[r.index].x.kind not in _revobs.KINDS]
    pulled = (_fastpayload.before_walk(entries, run, cols, flats, coff, tab, ev) if entries
              else None)
    wbar = None if pulled is None else pulled.wbar
    if hist is not None:  # the histograms of the nominal selection, region 0
        want_w |= hist.want_w((None, 0), tab)
        for gs, wb in hist.before_walk((None, 0), cols, run, sel, theta, widths,
                                       threads=threads).items():
            wbar = {} if wbar is None else wbar
            wbar[gs] = wbar.get(gs, 0.0) + wb
    walk = _walk(sel, want_w, wbar, threads)
    if value is None:
        off_of = {c: coff[ci] for ci, c in enumerate(tab.collections)}
        value = _value_states(cols, run, off_of, flats, ev, walk.pe,
                              {s: walk.ow[tab.gidx[s]] for s in fields}, threads)

    pe = walk.pe
    dy = cots[:, :1] + 2.0 * cots[:, 1:] * (ev * pe)  # (R, E): dL/dy_e
    dp = dy * ev  # dL/dP_e
    dev = dy * pe  # dL/dev_e
    if pulled is not None:  # the observables' entries (one row)
        dp += pulled.pbar
        dev += _fastpayload.after_walk(pulled, run, ev, walk, bars)
    by_walks = None
    if walked:  # event sums' and indexed observables' states (one row): their walks' vjp
        # the candidates the histograms pull back too: one vector-Jacobian product there
        defer = hist.pulled_keys((None, 0)) if hist is not None else frozenset()
        by_walks = _revobs.pull(walked, run, sel, keep[0], cols, block=fastkernel.BLOCK,
                                threads=threads, defer=defer)
        dev += by_walks.dev
    if hist is not None:  # the histograms' entries (one row), then the other selections
        pbar, evbar = hist.after_walk((None, 0), cols, run, sel, walk, theta, widths, grad,
                                      bars, threads=threads)
        dp += pbar
        dev += evbar
        by_walks = hist.pull((None, 0), cols, run, sel, theta, widths, grad, bars, dev,
                             by_walks, threads=threads)  # the leading objects' fills
    _chain(sel, walk, dp, dev, grad, bars, by_walks)
    for key, side, sub, column, factor in hist.selections(cols, run) if hist else ():
        # each other selection the histograms read: its walk with their cotangents
        other = _selection(side, sub, theta, widths)
        # a side's own score columns (those of its shifted inputs) take its cotangents
        at = bars if column is None else scorecols.side_arrays(bars, column, factor)
        saved = at[column].copy() if column in at else None
        wbar = hist.before_walk(key, side, sub, other, theta, widths, threads=threads)
        if trace is not None:
            trace[None if column is None else (column, factor), key[1]] += 1
        walk = _walk(other, hist.want_w(key, other.tab), wbar or None, threads)
        pbar, evbar = hist.after_walk(key, side, sub, other, walk, theta, widths, grad, at,
                                      threads=threads)
        lead = hist.pull(key, side, sub, other, theta, widths, grad, at, evbar, None,
                         threads=threads)
        _chain(other, walk, pbar[None], evbar[None], grad, at, lead)
        if saved is not None:  # a shifted score column: d(f x)/dx = f
            bars[column] = saved + factor * (at[column] - saved)
    if hist is not None:
        value.update(hist.value)
    # rows asked for (the others are 0)
    live = np.flatnonzero(np.any(cots != 0, axis=1) | bool(reads or hist))
    for entry in vjps:
        if live.size:
            grad[live] += np.asarray(scorecols.pull_many(entry, bars[entry.key][live]),
                                     np.float64)
    return value, grad[:, np.asarray(plan.trainable, dtype=np.int64)]


def chunk_pullback(cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, payload: list, *,
                   threads: int | None = None, trace: Counter | None = None) -> DatasetState:
    """One chunk's states and gradient share (module docstring), as
    :func:`analysis.pipeline.backends.jax.reverse.chunk_pullback` returns them, for a
    plan and a payload the numba rules serve."""
    value, grad = _shares(cols, plan, theta, widths, None, payload=payload, threads=threads,
                          trace=trace)
    return DatasetState(events=cols.n_events, sumw=float(np.sum(cols.weight)), chunks=1,
                        derived=Pullback(plan.trainable_names, value, grad[0]))


def chunk_yield_gradients(cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, *,
                          rows: tuple[bool, bool] = (True, True),
                          threads: int | None = None,
                          trace: Counter | None = None) -> DatasetState:
    """One chunk's value states and the gradients of its two yields: ``derived`` a
    :class:`~analysis.stats.Pullback` whose ``grad`` is ``(2, P)``, ``[dY_c/dtheta,
    dY2_c/dtheta]`` over ``plan.trainable_names`` (``plan``: one the numba rules serve).
    The chunks' rows add (``Y = sum_c Y_c``): with the merged yields' cotangents
    ``(a1, a2)``, ``a1 grad[0] + a2 grad[1]`` is ``dL/dtheta``, exactly, from this one
    pass (no second pass: :func:`analysis.optimize.reverse.reverse_objective`). ``rows``:
    which of the two to compute (a row not asked for is zeros: the cotangent it meets is 0)."""
    cots = np.eye(2) * np.asarray(rows, dtype=np.float64)[:, None]
    value, grad = _shares(cols, plan, theta, widths, cots, threads=threads, trace=trace)
    return DatasetState(events=cols.n_events, sumw=float(np.sum(cols.weight)), chunks=1,
                        derived=Pullback(plan.trainable_names, value, grad))
