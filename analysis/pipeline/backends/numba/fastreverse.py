"""Reverse mode's second pass on the numba kernel: a chunk's ``dL/dtheta`` from sensitivities.

For a pullback payload (:mod:`analysis.stats.pullback`) that reads only the selected
yields ``Y = sum_e y_e`` and ``Y2 = sum_e y_e^2`` (``y_e = ev_e P_e``: the event weight
times the soft branch cuts, times the probability that the event passes; what a
``significance`` objective reads), the chunk's share of the gradient is the gradient of
``L_c = a1 Y + a2 Y2`` (``a1``, ``a2``: the merged yields' cotangents), by the chain rule
on values only:

- ``dL_c/dy_e = a1 + 2 a2 y_e``, so ``dL_c/dP_e = ev_e dL_c/dy_e`` and
  ``dL_c/dev_e = P_e dL_c/dy_e``;
- per object, ``dP_e/dq_j`` (exact, :func:`analysis.pipeline.backends.numba.kernels._numba_sens.sensitivities`)
  and ``dq_j/dt`` = the other cuts' product times the soft cut's derivative in its
  threshold (``ds/dx = -ds/dt`` in its value: the cotangent of a learned score's
  column, then the network's vjp, :func:`analysis.pipeline.scorecols.score_columns`);
- per event, ``dev_e/dt`` likewise (an event-level score's column);
- trainable count thresholds: ``dP_e/dtheta = sum_k F_n[k] df[k]/dtheta``.

One walk per event for any number of parameters (the networks' weights, the cut
thresholds), which also gives the chunk's value states (its pass probabilities and
objects' weights: the yields and the observables of kinds ``S.f`` and branches, as
:func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns` computes them at
``order=0``: the same floats, but for the objects' weights where trainable count
thresholds keep more count states on the chain, whose sums then split the last state's
probability over more terms: within an ulp or two); observables of other kinds (event
sums, indexed objects) take their value states from that function (on the score columns:
:func:`analysis.pipeline.scorecols.bare`).
Exact: the same derivative as ``jax.grad`` of the JAX kernel
(:mod:`analysis.pipeline.backends.jax.reverse`, the reference; tests compare them). The
numba rules (:mod:`analysis.pipeline.backends.numba.rules`) say where it does not apply
(more than one object set or collection, histograms, other kernels' plans; a payload
that reads an observable's moments: their sensitivities are not provided); the chooser
then runs the JAX sweep.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import jax.numpy as jnp
import numpy as np

from analysis.pipeline import scorecols
from analysis.pipeline.backends.numba import _fastone, fastkernel
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
from analysis.pipeline.results import DatasetState, state_names, state_tree, yield_cotangents
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


def _chain_table(plan: Plan, theta, widths, counts_tr: tuple[int, ...]):
    """The pass table on the chain of count states and its tangents in ``counts_tr``."""
    tab, sp = _tables(plan), plan.sets
    if not tab.model.counts:
        return np.ones(1), np.zeros((1, len(counts_tr)))
    caps, f, df = _reduced(tab.model, *_pass_table(sp, theta, widths, counts_tr))
    states = _fastone.chain(_targets(tab.model, caps, tab.collections)[0, 1])
    return np.ascontiguousarray(f[states]), np.ascontiguousarray(df[states])


def _value_states(cols: ChunkColumns, plan: Plan, coll: str, coff: np.ndarray, flat: dict,
                  ev: np.ndarray, pe: np.ndarray, ow: np.ndarray, threads: int | None) -> dict:
    """The chunk's value states (yields and observables of kinds ``S.f`` and branches) from
    the sensitivities' walk: the event weights ``ev``, pass probabilities ``pe`` and
    object weights ``ow`` (``(N,)``) of the one set's collection ``coll`` (offsets
    ``coff``, fields ``flat``), in lane 0 of
    :func:`analysis.pipeline.backends.numba.fastkernel.observable_states`' inputs."""
    lanes = fastkernel._numba_dp.LANES

    def lane0(a: np.ndarray) -> np.ndarray:
        out = np.zeros((a.shape[0], lanes))
        out[:, 0] = a
        return out

    ev8, pe8, wo = lane0(ev), lane0(pe), lane0(ow)
    ys = yield_sums(ev8, pe8, 1, fastkernel.BLOCK, threads)
    value = state_tree(np.array(ys[0, 0], dtype=np.float64),
                       np.array(ys[1, 0], dtype=np.float64), {})
    heads = {o.x.head for o in plan.observables if o.x.kind == "field"}
    value["observables"], _ = fastkernel.observable_states(
        cols, plan, off_of={coll: coff}, flats={coll: flat}, pe=pe8, wo_of=dict.fromkeys(heads, wo),
        sa_of={}, ev=ev8, cands={}, np1=1, threads=threads)
    return value


def _shares(cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, cots, *,
            payload: list | None = None, threads: int | None = None,
            trace: Counter | None = None):
    """``(value, grads)``: the chunk's value states and ``grads[r] = d(a1_r Y + a2_r Y2)/dtheta``
    over the full parameter vector for each row ``(a1_r, a2_r)`` of ``cots`` ((R, 2));
    ``payload`` given: ``cots`` from it (one row; it reads the yields only). ``trace``:
    counts the walks of the selection (``trace[None, 0]``: one, two with event sums or
    indexed observables)."""
    theta = np.asarray(theta, dtype=np.float64).reshape(-1)
    widths = np.asarray(widths, dtype=np.float64).reshape(plan.n_widths)
    run = scorecols.bare(plan)
    cols, vjps = scorecols.score_columns(cols, plan, theta, vjp=True)
    # the value states from the sensitivities' walk where it gives what they read
    own = any(o.x.kind not in ("field", "branch") for o in run.observables)
    value = (fastkernel.evaluate_columns(cols, run, theta, widths, order=0, threads=threads,
                                         trace=trace)[0] if own else None)
    if payload is not None:  # one that reads the yields only (the numba rules checked it)
        cot = yield_cotangents(state_names(run), payload)
        if isinstance(cot, str):
            raise ValueError(f"the numba reverse pass has the yields' sensitivities only; "
                             f"the objective reads {cot}")
        cots = [cot]
    cots = np.asarray(cots, dtype=np.float64).reshape(-1, 2)
    n_rows = cots.shape[0]
    grad = np.zeros((n_rows, theta.size))
    bars = {scorecols.column_key(s): np.zeros((n_rows, rows)) for s, rows, _ in vjps}
    n_ev = int(cols.n_events)
    tab = _tables(run)
    coll = tab.collections[0]
    counts, flat = cols.collections.get(coll, (np.zeros(n_ev, np.int64), {
        f_: np.zeros(0) for f_ in dict(run.sets.fields).get(coll, ())}))
    counts = np.asarray(counts, dtype=np.int64)
    coff = np.zeros(n_ev + 1, np.int64)
    np.cumsum(counts, out=coff[1:])
    n_obj = int(coff[-1])

    # per object: the soft cuts and q; per event: the branch cuts and ev
    cuts = tab.set_cuts[0]
    raw = [np.asarray(flat.get(c.field, np.zeros(n_obj)), dtype=np.float64)[:n_obj] for c in cuts]
    soft = [_soft(x, c, theta, widths, c.absolute) for c, x in zip(cuts, raw, strict=True)]
    q = _others([s for s, _ in soft], -1, np.ones(n_obj))
    ecuts = one_sided(run.event_cuts)
    esoft = [_soft(np.asarray(cols.events[c.key], dtype=np.float64), c, theta, widths) for c in ecuts]
    w = np.asarray(cols.weight, dtype=np.float64)
    ev = _others([s for s, _ in esoft], -1, w)

    counts_tr = tuple(p for p, _ in run.sets.thresholds if p is not None and p in run.trainable)
    f, df = _chain_table(run, theta, widths, counts_tr)
    pe, dq = np.zeros(n_ev), np.zeros(n_obj)
    fn = np.zeros((n_ev, f.shape[0]))
    want_w = value is None and any(o.x.kind == "field" for o in run.observables)
    ow = np.zeros(n_obj if want_w else 0)
    if trace is not None:
        trace[None, 0] += 1
    if n_ev:
        args = (coff, np.ascontiguousarray(q), f, want_w, max(int(counts.max(initial=0)), 1),
                fastkernel.BLOCK, pe, dq, fn, ow)
        fastkernel._run_blocks(_numba_sens.sensitivities, args,
                               max(1, -(-n_ev // fastkernel.BLOCK)), threads)
    if value is None:
        value = _value_states(cols, run, coll, coff, flat, ev, pe, ow, threads)

    dy = cots[:, :1] + 2.0 * cots[:, 1:] * (ev * pe)  # (R, E): dL/dy_e
    dp = dy * ev  # dL/dP_e
    dev = dy * pe  # dL/dev_e
    for c, cut in enumerate(ecuts):
        g = dev * (_others([s for s, _ in esoft], c, w) * esoft[c][1])  # dL/dt per event
        if cut.param is not None:
            grad[:, cut.param] += g.sum(axis=1)
        key = f"event:{cut.key}"
        if key in bars:
            bars[key][:, :n_ev] -= g  # ds/dx = -ds/dt
    dlq = np.repeat(dp, counts, axis=1) * dq  # dL/dq_j
    for c, cut in enumerate(cuts):
        g = dlq * (_others([s for s, _ in soft], c, np.ones(n_obj)) * soft[c][1])
        if cut.param is not None:
            grad[:, cut.param] += g.sum(axis=1)
        key = f"{coll}:{cut.field}"
        if key in bars:
            bars[key][:, :n_obj] -= g * np.sign(raw[c]) if cut.absolute else g
    if counts_tr:
        g = dp @ (fn @ df)  # (R, K)
        for k, p in enumerate(counts_tr):
            grad[:, p] += g[:, k]
    live = np.flatnonzero(np.any(cots != 0, axis=1))  # rows asked for (the others are 0)
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
    plan and a payload the numba rules serve (the payload reads the yields only)."""
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
