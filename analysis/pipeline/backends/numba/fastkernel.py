"""The pipeline kernel in numba: states and their Jacobian from unpadded columns.

:func:`evaluate_columns` returns the ``(value, jac)`` pytrees of
:func:`analysis.pipeline.backends.jax.passes.evaluate_chunk` (the reference) from a
chunk's :class:`~analysis.pipeline.layout.ChunkColumns`, for every plan the numba rules
serve (:mod:`analysis.pipeline.backends.numba.rules`). The selection is the recursions
of :mod:`analysis.select.objects` as loops with forward-mode tangents: the histograms'
walk :func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk` with one region
(values only: the same walk compiled without tangents, bit for bit lane 0), or for one
collection with one set and neither event sums nor indexed observables, the common
case, the one-set walk :func:`analysis.select.chainwalk.cut_walk`; indexed observables:
:mod:`analysis.pipeline.backends.numba._fastleading`; the pass table from its JAX
definition (:mod:`analysis.pipeline.backends.numba._fasttables`). Moments: power
sums about a constant centre (first pass), then the formulas of
:mod:`analysis.stats._core` with their derivatives
(:mod:`analysis.pipeline.backends.numba._fastmoments`). :func:`observable_entries`
gives histogram entries and their soft weights from the same loops (value only).

Events are processed in blocks of :data:`BLOCK` on the kernel's threads
(:mod:`analysis.pipeline.backends.numba._fastpool`: no result depends on their number).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, NamedTuple

import numpy as np

from analysis.pipeline.backends.numba import _fastleading
from analysis.pipeline.backends.numba._fastmoments import (
    comoments_state,
    moments_state,
    safe_div,
    sum_moments_state,
)
from analysis.pipeline.backends.numba._fastpatterns import patterns_into, soft_range
from analysis.pipeline.backends.numba._fastpool import (
    _run_blocks,
    _work,
    yield_sums,
)
from analysis.pipeline.backends.numba._fastpool import _threads as _threads  # read by callers
from analysis.pipeline.backends.numba._fasttables import (
    _par_index,
    _Tables,
    _tables,
    _value,
    chain,
    offsets,
    one_sided,
    walk_args,
    walk_table,
)
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_hist, _numba_sums
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import state_tree
from analysis.select import chainwalk
from analysis.select.lanes.policy import host_args

__all__ = ["BLOCK", "evaluate_columns", "observable_entries", "observable_states",
           "selected_weights"]

# Events per block: partial sums per block, added in block order (deterministic).
BLOCK = 4096


# --- the host side ---------------------------------------------------------------------


def _inputs(plan: Plan, order: int, theta: Any, widths: Any
            ) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """``(theta, widths, trainable)`` of a numba pass: float64 ``theta`` (flat) and
    ``widths`` (``plan.n_widths``), the trainable indices (none at ``order=0``)."""
    theta = np.asarray(theta, dtype=np.float64).reshape(-1)
    widths = np.asarray(widths, dtype=np.float64).reshape(plan.n_widths)
    return theta, widths, (plan.trainable if order >= 1 else ())


def event_sum_inputs(plan: Plan, tab: _Tables, base: np.ndarray, flats: dict,
                     sums: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(sum_x, sum_has, binom)`` of the walk's event sums (the observables ``sums`` of
    ``plan``, ``sum(S.f)``/``count(S)``): ``sum_x[o, g]`` object ``g``'s value (1 for a
    count; ``base``: each collection's first global index, ``flats`` its fields),
    ``sum_has[o, c, p]`` 1 where pattern ``p`` of collection ``c`` holds the summed set
    (``tab``: the walk's tables), ``binom[m, i] = C(m, i)`` up to the highest order."""
    sp = plan.sets
    sum_x = np.zeros((len(sums), max(int(base[-1]), 1)))
    sum_has = np.zeros((len(sums), len(tab.collections), tab.pat.shape[1]))
    for o, i in enumerate(sums):
        x = plan.observables[i].x
        ci = tab.collections.index(sp.collection_of(x.head))
        c = tab.collections[ci]
        sum_x[o, base[ci]: base[ci + 1]] = 1.0 if x.kind == "count" else flats[c][x.field]
        sum_has[o, ci, : tab.n_pat[ci]] = tab.pat[ci, : tab.n_pat[ci], tab.local[x.head]] == 1
    big_r = max([sp.orders[i] for i in sums] + [0])
    binom = np.array([[math.comb(r, i) for i in range(big_r + 1)] for r in range(big_r + 1)],
                     np.float64)
    return sum_x, sum_has, binom


class _Weights(NamedTuple):
    """What the loops give for one chunk (lanes: value, then tangents)."""

    tab: _Tables
    coff: np.ndarray  # (C, E + 1) object offsets per collection
    base: np.ndarray  # (C + 1,) each collection's first global object index
    flats: dict  # collection -> {field: flat values}
    pe: np.ndarray  # (E, LANES) P(event passes)
    ow: np.ndarray  # (slots, N, LANES) P(object in its set and the event passes), by global index
    slot_of: dict  # set name -> slot of ow
    sums: list  # observable indices of event sums, in sa's order
    sa: np.ndarray  # (sums, E, R + 1, LANES) E[X^r 1_pass]
    ev: np.ndarray  # (E, LANES) event weight x soft branch cuts; (E,) the weights (lanes=False)
    cands: dict  # (set, depth) -> _fastleading.Candidates of indexed observables
    n_blocks: int
    np1: int  # lanes used: 1 + trainable parameters
    ys: np.ndarray | None  # (2, np1) yield_sums(ev, pe) if asked and computed in the walk


def _event_weights(cols: ChunkColumns, plan: Plan, theta, widths, trainable) -> np.ndarray:
    """``(E, LANES)``: the event weight times the soft branch cuts, with tangents."""
    n_ev = int(cols.n_events)
    ev = np.zeros((n_ev, _numba_dp.LANES))
    ev[:, 0] = cols.weight
    for cut in one_sided(plan.event_cuts):
        s_buf, ds_buf = _numba_dp.soft_array(
            cols.events[cut.key], _value(theta, cut.param, cut.value), widths[cut.width_index],
            cut.greater, cut.inclusive)
        k = _par_index(trainable, cut.param)
        ev[:, 1:] *= s_buf[:, None]
        if k >= 0:
            ev[:, 1 + k] += ev[:, 0] * ds_buf
        ev[:, 0] *= s_buf
    return ev


def _weights(cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, *, order: int,
             threads: int | None, fused: bool = True, value_loop: bool = True,
             trace: Counter | None = None, lanes: bool = True,
             yields: bool = False) -> _Weights:
    """Run the loops on one chunk (``plan``: one the numba rules serve); ``fused``,
    ``value_loop``: :class:`analysis.pipeline.backend.Backend`'s options of those names;
    ``trace``: counts the walk (side None, region 0: the nominal selection);
    ``lanes=False`` (only the yields read the event weights): a plan without soft
    branch cuts gets its ``(E,)`` weights as ``ev`` (:func:`yield_sums` reads them as
    the lanes' weights with zero tangents), not an ``(E, LANES)`` array of them;
    ``yields``: also the selected yields (:func:`yield_sums`) as ``ys``, in the one-set
    walk's hand-off (else ``ys`` None)."""
    if trace is not None:
        trace[None, 0] += 1
    theta, widths, trainable = _inputs(plan, order, theta, widths)
    np1 = len(trainable) + 1
    sp = plan.sets
    tab = _tables(plan)
    n_ev = int(cols.n_events)
    n_blocks = max(1, -(-n_ev // BLOCK))

    # per collection: offsets, own set probabilities (soft cuts), pattern probabilities
    coff, base, flats, max_seq = offsets(cols, tab.collections, sp)
    n_lanes = _numba_dp.LANES  # not `lanes`: the argument says whether ev has them
    fused = fused and tab.one_set and not any(
        obs.x.kind in ("sum", "count", "index", "call") for obs in plan.observables)
    if not fused:  # the soft cuts, then the patterns: the histograms' kernels, one variant
        n_tot, p_max = int(base[-1]), tab.pat.shape[1]
        pv_two, pd_all = _work("pv2", (n_tot, p_max, 2)), _work("pd", (n_tot, p_max, n_lanes))
        patterns_into(tab, coff, base, [flats], theta, widths, trainable, threads, None, {},
                      pv_two, pd_all)
        pv_all = _work("pv", (n_tot, p_max))
        pv_all[:] = pv_two[:, :, 0]

    # the pass table and its derivative (the JAX definition), reduced
    tgt, f, df = walk_table(tab, sp, theta, widths, trainable)
    df_l = np.zeros((f.shape[0], n_lanes))
    df_l[:, 1:np1] = df

    # what is asked: per-object weights of field observables' sets, event sums
    slot_of = {s: k for k, s in enumerate(dict.fromkeys(
        o.x.head for o in plan.observables if o.x.kind == "field"))}
    sums = [i for i, o in enumerate(plan.observables) if o.x.kind in ("sum", "count")]
    sum_x, sum_has, binom = event_sum_inputs(plan, tab, base, flats, sums)
    big_r = binom.shape[0] - 1
    # object weights by global index (base: each collection's first)
    pe = _work("pe", (n_ev, n_lanes))
    ow = _work("ow", (max(len(slot_of), 1), max(int(base[-1]), 1), n_lanes))
    sa = np.zeros((len(sums), n_ev, big_r + 1, n_lanes))
    ev = (np.ascontiguousarray(cols.weight, dtype=np.float64)
          if not lanes and not plan.event_cuts else
          _event_weights(cols, plan, theta, widths, trainable))
    ys = None
    if n_ev and fused:  # the one-set walk on the chain of states the objects reach
        cuts = tab.set_cuts[0]
        ss = np.empty((len(cuts), int(coff[0, -1])))
        on = chain(tgt[0, 1])
        par = np.array([_par_index(trainable, c.param) for c in cuts], np.int64)
        args = (coff[0], ss, np.array([widths[c.width_index] for c in cuts], np.float64),
                np.array([c.greater for c in cuts], np.bool_), par, f[on],
                # nothing to differentiate: the walk without tangents (the same floats)
                0.0 if np.all(par < 0) and not np.any(df_l) else df_l[on],
                bool(tab.set_names[0] in slot_of), max(max_seq, 1), BLOCK, pe, ow[0])
        walk = _numba_dp.compiled(chainwalk.cut_walk, args)
        flat, obj = flats[tab.collections[0]], coff[0]
        ys = np.zeros((n_blocks, 2, np1)) if yields else None
        sums_args = host_args(_numba_sums.block_sums, (ev, pe, np1, BLOCK, ys))

        def blocks(b0: int, b1: int) -> None:
            # one hand-off per chunk: a thread's blocks' cut probabilities (its events'
            # objects), walk and yield sums; each element-wise or per block, so the same
            # floats as three passes over the whole chunk (in smaller groups of blocks
            # no faster: the walk, not memory, bounds it)
            soft_range(cuts, flat, theta, widths, ss, int(obj[b0 * BLOCK]),
                       int(obj[min(b1 * BLOCK, n_ev)]))
            walk(*args, b0, b1)
            if ys is not None:
                _numba_sums.block_sums(*sums_args, b0, b1)

        _run_blocks(blocks, (), n_blocks, threads)
        ys = None if ys is None else ys.sum(axis=0)
    elif n_ev and not tab.collections:  # no objects: each event at the table's state 0
        pe[:] = df_l[0]
        pe[:, 0] = f[0]
    elif n_ev:  # every other plan: the histograms' walk of region 0, one variant (h = 0),
        # values only (value_loop) compiled without tangents (pd_all = dfs = 0.0: numbers
        # for lane vectors, the same floats as lane 0 of the 8 lanes)
        values = value_loop and not trainable
        args = walk_args(tab, sp, coff, base, max_seq, pv_two, 0.0 if values else pd_all, 0,
                         tgt, f[None], 0.0 if values else df_l[None],
                         [(0, s) for s in slot_of], (sum_x, sum_has, binom), BLOCK,
                         pe.reshape(1, 1, n_ev, n_lanes), ow.reshape((1, *ow.shape)), sa)
        _run_blocks(_numba_dp.compiled(_numba_hist.walk, args), args, n_blocks, threads)

    cands = (_fastleading.walk(plan, tab, coff, base, flats, pv_all, pd_all, tgt, f, df_l,
                               BLOCK, n_blocks, threads) if not fused else {})
    return _Weights(tab, coff, base, flats, pe, ow, slot_of, sums, sa, ev, cands, n_blocks, np1, ys)


def _values(node, cols: ChunkColumns, plan: Plan, flats: dict, cands: dict) -> np.ndarray:
    """A field's (flat), a branch's or an indexed expression's (per candidate) values,
    ``|values|`` for ``abs(...)``; float64."""
    k = _fastleading.key(node)
    if k is not None:
        return _fastleading.values(node, cands[k], plan, flats, cols.events)
    if node.kind == "field":
        v = flats[plan.sets.collection_of(node.head)][node.field]
    else:
        v = cols.events[node.head]
    return np.ascontiguousarray(np.abs(v) if node.absolute else v, dtype=np.float64)


def _reads(wt: _Weights, plan: Plan) -> tuple[dict, dict]:
    """``(off_of, wo_of)`` of :func:`observable_states` from the walk ``wt``."""
    off_of = {c: wt.coff[ci] for ci, c in enumerate(wt.tab.collections)}
    at = {c: slice(int(wt.base[ci]), int(wt.base[ci + 1]))
          for ci, c in enumerate(wt.tab.collections)}
    return off_of, {s: wt.ow[k, at[plan.sets.collection_of(s)]] for s, k in wt.slot_of.items()}


def _entries(x, plan: Plan, off_of: dict, wo_of: dict, pe: np.ndarray,
             cands: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, weights)`` of the entries of the observable ``x`` (the arguments of
    :func:`observable_states`): one per object of its set (``S.f``), per candidate (an
    indexed expression) or per event (a branch: ``P(pass)``)."""
    if x.kind == "field":
        return off_of[plan.sets.collection_of(x.head)], wo_of[x.head]
    if x.kind in ("index", "call"):
        return cands[_fastleading.key(x)][:2]
    return np.arange(pe.shape[0] + 1, dtype=np.int64), pe


def evaluate_columns(
    cols: ChunkColumns,
    plan: Plan,
    theta: Any,
    widths: Any,
    *,
    order: int = 1,
    threads: int | None = None,
    fused: bool = True,
    value_loop: bool = True,
    trace: Counter | None = None, keep: list | None = None,
) -> tuple[dict, dict | None]:
    """``(value, jac)`` of one chunk, as :func:`analysis.pipeline.backends.jax.passes.evaluate_chunk`
    returns them (numpy float64; ``jac`` None for ``order=0``); ``plan``: one the
    numba rules serve (without histograms: :mod:`~analysis.pipeline.backends.numba.fasthist`).
    ``threads``: see :func:`_threads`; ``fused``, ``value_loop``: which loops run
    (:class:`analysis.pipeline.backend.Backend`); the result depends on none. ``trace``
    (a :class:`collections.Counter`): ``trace[None, 0]`` counts the walks of the
    selection (one); ``keep`` (a list): the walk's :class:`_Weights` appended to it."""
    wt = _weights(cols, plan, theta, widths, order=order, threads=threads, fused=fused,
                  value_loop=value_loop, trace=trace, lanes=bool(plan.observables),
                  yields=True)
    if keep is not None:
        keep.append(wt)
    ys = wt.ys if wt.ys is not None else yield_sums(wt.ev, wt.pe, wt.np1, BLOCK, threads)
    value = state_tree(np.array(ys[0, 0], dtype=np.float64),
                       np.array(ys[1, 0], dtype=np.float64), {})
    jac = state_tree(ys[0, 1:], ys[1, 1:], {})
    off_of, wo_of = _reads(wt, plan)
    sa_of = {i: wt.sa[k] for k, i in enumerate(wt.sums)}
    value["observables"], jac["observables"] = observable_states(
        cols, plan, off_of=off_of, flats=wt.flats, pe=wt.pe, wo_of=wo_of, sa_of=sa_of,
        ev=wt.ev, cands=wt.cands, np1=wt.np1, threads=threads)
    return value, (jac if order >= 1 else None)


def observable_states(cols: ChunkColumns, plan: Plan, *, off_of: dict, flats: dict,
                      pe: np.ndarray, wo_of: dict, sa_of: dict, ev: np.ndarray, cands: dict,
                      np1: int, threads: int | None) -> tuple[dict, dict]:
    """``(value, jac)`` of ``plan``'s observables (``{name: {"moments"|"comoments":
    ...}}``) from one walk of the selection: ``off_of[c]`` the object offsets of
    collection ``c``, ``flats[c]`` its fields, ``pe`` ``(E, LANES)`` ``P(pass)``,
    ``wo_of[s]`` ``(N_c, LANES)`` ``P(j in s and the event passes)`` per object of
    every set of a field observable, ``sa_of[i]`` ``(E, R + 1, LANES)``
    ``E[X^r 1_pass]`` of event-sum observable ``i``, ``ev`` ``(E, LANES)`` the event
    weights, ``cands`` the indexed observables' candidates
    (:func:`analysis.pipeline.backends.numba._fastleading.walk`); lanes: value, then the
    ``np1 - 1`` tangents. The walk is :func:`_weights`'s or, with histograms,
    :mod:`~analysis.pipeline.backends.numba.fasthist`'s (region 0 of its nominal walk):
    every consumer of a chunk reads one walk of its selection."""
    sp = plan.sets
    n_ev = int(cols.n_events)
    n_blocks = max(1, -(-n_ev // BLOCK))
    lanes = _numba_dp.LANES
    vobs: dict[str, Any] = {}
    jobs: dict[str, Any] = {}
    for i, obs in enumerate(plan.observables):
        x = obs.x
        ventry: dict[str, Any] = {}
        jentry: dict[str, Any] = {}
        if x.kind in ("sum", "count"):
            ventry["moments"], jentry["moments"] = sum_moments_state(
                sa_of[i][:, :, :np1], ev[:, :np1], sp.orders[i])
        else:
            eoff, wo = _entries(x, plan, off_of, wo_of, pe, cands)
            xv = _values(x, cols, plan, flats, cands)
            yv = xv if obs.y is None else _values(obs.y, cols, plan, flats, cands)
            has_y = obs.y is not None
            first = np.zeros((n_blocks, 3))
            _run_blocks(_numba_dp.centre_sums, (eoff, xv, yv, wo, ev, BLOCK, first), n_blocks,
                        threads)
            first = first.sum(axis=0)
            cx = safe_div(first[1], first[0])
            cy = safe_div(first[2], first[0])
            fx, fy = bool(np.isfinite(cx)), bool(np.isfinite(cy))
            out = np.zeros((n_blocks, 8, lanes))
            args = (eoff, xv, yv, has_y, wo, ev, cx if fx else 0.0, cy if fy else 0.0, BLOCK, out)
            _run_blocks(_numba_dp.compiled(_numba_dp.accumulate, args), args, n_blocks, threads)
            tot = out.sum(axis=0)[:, :np1]
            if not fx:  # deviations from an infinite mean are set to 0
                tot[1:5] = 0.0
                tot[7] = 0.0
            if not fy:
                tot[5:8] = 0.0
            if obs.univariate:
                ventry["moments"], jentry["moments"] = moments_state(tot, cx)
            if obs.bivariate:
                ventry["comoments"], jentry["comoments"] = comoments_state(tot, cx, cy)
        vobs[obs.name] = ventry
        jobs[obs.name] = jentry
    return vobs, jobs


def selected_weights(
    cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, *, threads: int | None = None,
) -> np.ndarray:
    """``(E,)`` float64: each event's weight times its probability to pass the selection
    (``selected_sumw`` is their sum; width 0: the weight or 0). ``plan``: one the
    numba rules serve at order 0."""
    wt = _weights(cols, plan, theta, widths, order=0, threads=threads)
    return wt.ev[:, 0] * wt.pe[:, 0]


def observable_entries(
    cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, index: int, *,
    threads: int | None = None, fused: bool = True, value_loop: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """``(x, w)``: the entries of observable ``index`` and their soft weights (numpy
    float64, for histograms), as :func:`analysis.pipeline.backends.jax.setkernel.observable_entries`
    defines them (entries of weight 0 included): per object ``(x_j, w_e P(j in S and
    the event passes))`` for ``S.f``, per candidate tuple ``(x_a, w_e P(a is S[0..r] and
    the event passes))`` for an indexed expression (0 where the weight is 0), per event
    ``(x_e, w_e P(pass))`` for a branch and
    ``(E[X 1_pass] / P(pass), w_e P(pass))`` for ``sum(S.f)``/``count(S)`` (0 where
    ``P(pass) = 0``). ``plan``: one the numba rules serve at order 0. ``fused``,
    ``value_loop``: as in :func:`evaluate_columns`."""
    wt = _weights(cols, plan, theta, widths, order=0, threads=threads, fused=fused,
                  value_loop=value_loop)
    node = plan.observables[index].x
    ev, pe = wt.ev[:, 0], wt.pe[:, 0]
    if node.kind in ("sum", "count"):
        a = wt.sa[wt.sums.index(index), :, 1, 0]
        return np.divide(a, pe, out=np.zeros_like(a), where=pe != 0), ev * pe
    off, wo = _entries(node, plan, *_reads(wt, plan), wt.pe, wt.cands)
    w = np.repeat(ev, np.diff(off)) * wo[:, 0]
    x = _values(node, cols, plan, wt.flats, wt.cands)
    return (np.where(w != 0, x, 0.0) if node.kind in ("index", "call") else x), w
