"""Reverse mode's second pass on the numba kernel: a chunk's ``dL/dtheta`` from sensitivities.

For a pullback payload (:mod:`analysis.stats.pullback`) that reads only the selected
yields ``Y = sum_e y_e`` and ``Y2 = sum_e y_e^2`` (``y_e = ev_e P_e``: the event weight
times the soft branch cuts, times the probability that the event passes; what a
``significance`` objective reads), the chunk's share of the gradient is the gradient of
``L_c = a1 Y + a2 Y2`` (``a1``, ``a2``: the merged yields' cotangents), by the chain rule
on values only:

- ``dL_c/dy_e = a1 + 2 a2 y_e``, so ``dL_c/dP_e = ev_e dL_c/dy_e`` and
  ``dL_c/dev_e = P_e dL_c/dy_e``;
- per object and set, ``dP_e/dq_js`` (``q_js``: the product of set ``s``'s own cuts;
  exact: one collection with one set on the chain,
  :func:`analysis.pipeline.backends.numba.kernels._numba_sens.sensitivities`; any other
  count model, several sets per collection with their parents, several collections,
  joint counts, through each object's pattern probabilities,
  :mod:`analysis.pipeline.backends.numba._fastsens`)
  and ``dq_js/dt`` = the other cuts' product times the soft cut's derivative in its
  threshold (``ds/dx = -ds/dt`` in its value: the cotangent of a learned score's
  column, then the network's vjp, :func:`analysis.pipeline.scorecols.score_columns`);
- per event, ``dev_e/dt`` likewise (an event-level score's column);
- trainable count thresholds: ``dP_e/dtheta = sum_k F_n[k] df[k]/dtheta``.

A payload that also reads observables of kinds ``S.f`` (and ``abs``) and branches
(their moments and comoments: power sums over entries, :mod:`analysis.pipeline.backends.numba._fastpayload`)
adds the cotangents of each entry's weight and values: a branch's weight ``ev_e P_e``
adds to ``dL/dP_e`` and ``dL/dev_e``; an object's weight ``ev_e w_js`` gives the objects'
weights' cotangents, which the walk's vector-Jacobian product (one more sweep each way,
:func:`analysis.pipeline.backends.numba.kernels._numba_sens.pattern_sensitivities`)
turns into ``dL/dq_js`` and ``dL/dthreshold``; a value that is a score's column adds to
the column's cotangent. A payload that reads event sums' moments (``sum(S.f)``,
``count(S)``) or indexed observables' states (``S[i].f``, ``mass(S[0] + S[1])``) adds,
through their walks' vector-Jacobian products (one sweep each way per event,
:mod:`analysis.pipeline.backends.numba._revobs`), the cotangents of every object's
pattern probabilities (chained to ``dL/dq_js`` as ``H`` above), of the event weights and
of the trainable count thresholds; their per-event moments and candidates come from the
value walk below.

One walk per event for any number of parameters (the networks' weights, the cut
thresholds), which also gives the chunk's value states (its pass probabilities and
objects' weights: the yields and the observables of kinds ``S.f`` and branches, as
:func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns` computes them at
``order=0``: the same floats, but for the objects' weights where trainable count
thresholds keep more count states on the chain, whose sums then split the last state's
probability over more terms, and in the general model where an object's weight is summed
over its patterns on the host: within an ulp or two); observables of other kinds (event
sums, indexed objects) take their value states from that function (on the score columns:
:func:`analysis.pipeline.scorecols.bare`).
Exact: the same derivative as ``jax.grad`` of the JAX kernel
(:mod:`analysis.pipeline.backends.jax.reverse`, the reference; tests compare them). The
numba rules (:mod:`analysis.pipeline.backends.numba.rules`) say where it does not apply
(histograms, other kernels' plans); the chooser then runs the JAX sweep.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import jax.numpy as jnp
import numpy as np

from analysis.pipeline import scorecols
from analysis.pipeline.backends.numba import (
    _fastone,
    _fastpayload,
    _fastsens,
    _revobs,
    fastkernel,
)
from analysis.pipeline.backends.numba._fastpool import yield_sums
from analysis.pipeline.backends.numba._fasttables import (
    _pass_table,
    _reduced,
    _tables,
    _targets,
    one_sided,
)
from analysis.pipeline.backends.numba.kernels import _numba_sens
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import DatasetState, state_tree
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


def _one_set_walk(plan: Plan, coff: np.ndarray, q: np.ndarray, theta, widths,
                  counts_tr: tuple[int, ...], want_w: bool, max_seq: int,
                  threads: int | None) -> _fastsens.Walk:
    """The sensitivities' walk of one collection with one set: the chain
    (:func:`analysis.pipeline.backends.numba.kernels._numba_sens.sensitivities`)."""
    tab = _tables(plan)
    if tab.model.counts:
        caps, f, df = _reduced(tab.model, *_pass_table(plan.sets, theta, widths, counts_tr))
        states = _fastone.chain(_targets(tab.model, caps, tab.collections)[0, 1])
        f, df = np.ascontiguousarray(f[states]), np.ascontiguousarray(df[states])
    else:
        f, df = np.ones(1), np.zeros((1, len(counts_tr)))
    n_ev, n_obj = coff.shape[0] - 1, int(coff[-1])
    pe, dq = np.zeros(n_ev), np.zeros(n_obj)
    fn = np.zeros((n_ev, f.shape[0]))
    ow = np.zeros(n_obj if want_w else 0)
    if n_ev:
        args = (coff, np.ascontiguousarray(q), f, want_w, max(max_seq, 1), fastkernel.BLOCK,
                pe, dq, fn, ow)
        fastkernel._run_blocks(_numba_sens.sensitivities, args,
                               max(1, -(-n_ev // fastkernel.BLOCK)), threads)
    return _fastsens.Walk(pe, {0: dq}, {0: ow} if want_w else {}, fn @ df)


def _value_states(cols: ChunkColumns, plan: Plan, off_of: dict, flats: dict, ev: np.ndarray,
                  pe: np.ndarray, wo_of: dict, threads: int | None) -> dict:
    """The chunk's value states (yields and observables of kinds ``S.f`` and branches) from
    the sensitivities' walk: the event weights ``ev``, pass probabilities ``pe`` (``(E,)``)
    and objects' weights ``wo_of[set]`` (``(N_c,)``; collection ``c``'s offsets
    ``off_of[c]``, fields ``flats[c]``), in lane 0 of
    :func:`analysis.pipeline.backends.numba.fastkernel.observable_states`' inputs."""
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


def _shares(cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, cots, *,
            payload: list | None = None, threads: int | None = None,
            trace: Counter | None = None):
    """``(value, grads)``: the chunk's value states and ``grads[r] = d(a1_r Y + a2_r Y2)/dtheta``
    over the full parameter vector for each row ``(a1_r, a2_r)`` of ``cots`` ((R, 2));
    ``payload`` given: ``cots`` from it (one row; with the observable states it reads,
    module docstring). ``trace``:
    counts the walks of the selection (``trace[None, 0]``: one, two with event sums or
    indexed observables)."""
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
    if payload is not None:  # one the numba rules serve (they checked it)
        parsed = _fastpayload.parse(run, payload)
        if isinstance(parsed, str):
            raise ValueError("the numba reverse pass does not pull back a state the "
                             f"objective reads: {parsed}")
        cot, reads = parsed
        cots = [cot]
    cots = np.asarray(cots, dtype=np.float64).reshape(-1, 2)
    n_rows = cots.shape[0]
    grad = np.zeros((n_rows, theta.size))
    bars = {scorecols.column_key(s): np.zeros((n_rows, rows)) for s, rows, _ in vjps}
    n_ev = int(cols.n_events)
    tab = _tables(run)

    # per collection: offsets and fields; per set: its own soft cuts and q
    n_coll = len(tab.collections)
    coff = np.zeros((n_coll, n_ev + 1), np.int64)
    base = np.zeros(n_coll + 1, np.int64)
    flats, max_seq = {}, 0
    for ci, c in enumerate(tab.collections):
        counts, flat = cols.collections.get(c, (np.zeros(n_ev, np.int64), {
            f_: np.zeros(0) for f_ in dict(run.sets.fields).get(c, ())}))
        flats[c] = flat
        np.cumsum(np.asarray(counts, dtype=np.int64), out=coff[ci, 1:])
        base[ci + 1] = base[ci] + coff[ci, -1]
        max_seq += int(np.max(counts, initial=0))
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
    if tab.one_set and pulled is None:
        walk = _one_set_walk(run, coff[0], q_of[0], theta, widths, counts_tr, bool(want_w),
                             max_seq, threads)
    else:  # any count model, or the walk's vector-Jacobian product (observables read)
        walk = _fastsens.walk(tab, run.sets, coff, base, q_of, theta, widths, counts_tr,
                              want_w, max_seq=max_seq, block=fastkernel.BLOCK, threads=threads,
                              wbar=None if pulled is None else pulled.wbar)
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
        dev += _fastpayload.after_walk(pulled, run, coff, tab, ev, walk, bars)
    if walked:  # event sums' and indexed observables' states (one row): their walks' vjp
        by_walks = _revobs.pull(walked, run, tab, keep[0], cols, q_of, theta, widths, counts_tr,
                                ev, max_seq=max_seq, block=fastkernel.BLOCK, threads=threads)
        dev += by_walks.dev
    for c, cut in enumerate(ecuts):
        g = dev * (_others([s for s, _ in esoft], c, w) * esoft[c][1])  # dL/dt per event
        if cut.param is not None:
            grad[:, cut.param] += g.sum(axis=1)
        key = f"event:{cut.key}"
        if key in bars:
            bars[key][:, :n_ev] -= g  # ds/dx = -ds/dt
    for gs, (ci, cuts, raw, soft) in enumerate(sets):
        coll = tab.collections[ci]
        dlq = np.repeat(dp, np.diff(coff[ci]), axis=1) * walk.dq[gs]  # dL/dq_j
        if walk.dq_w is not None:  # the objects' weights' share (the walk's vjp)
            dlq += walk.dq_w[gs]
        if walked:
            dlq += by_walks.dq[gs]
        n_obj = dlq.shape[1]
        for c, cut in enumerate(cuts):
            g = dlq * (_others([s for s, _ in soft], c, np.ones(n_obj)) * soft[c][1])
            if cut.param is not None:
                grad[:, cut.param] += g.sum(axis=1)
            key = f"{coll}:{cut.field}"
            if key in bars:
                bars[key][:, :n_obj] -= g * np.sign(raw[c]) if cut.absolute else g
    if counts_tr:
        g = dp @ walk.dfe  # (R, K)
        if walk.dfw is not None:
            g += walk.dfw.sum(axis=0)
        if walked:
            g += by_walks.dcount
        for k, p in enumerate(counts_tr):
            grad[:, p] += g[:, k]
    # rows asked for (the others are 0)
    live = np.flatnonzero(np.any(cots != 0, axis=1) | bool(reads))
    for spec, _, back in vjps:
        if live.size:
            key = scorecols.column_key(spec)
            g = scorecols.apply_vjps(back, {key: jnp.asarray(bars[key][live])})
            grad[live] += np.asarray(g, np.float64)
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
