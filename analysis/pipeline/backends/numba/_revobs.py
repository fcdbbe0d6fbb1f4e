"""Reverse mode for the observables without entries of their own on the numba kernel.

Event sums (``sum(S.f)``, ``count(S)``) and indexed observables (``S[i].f``,
``mass(S[0] + S[1])``) read by a pullback payload: each kind's share (:func:`pull`)
adds its cotangents of every object's pattern probabilities ``dL/dpi_jp`` (its walk's
vector-Jacobian product), of the event weights and of the trainable count thresholds;
:func:`pull` chains the pattern probabilities to each set's own probability (``pi`` is
multilinear in them: :func:`analysis.pipeline.backends.numba._fastsens.set_sensitivities`),
which :mod:`analysis.pipeline.backends.numba.fastreverse` chains to the cuts' thresholds
and score columns with the pass probability's share. What each share reads comes from
the value walk (:func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns`,
which gives the chunk's value states too); the summed values and the indexed
expressions' values are data (they read fields, never a score's column).

Event sums (:func:`_sums`): the state is
:func:`analysis.stats._core.moments_from_expectations` of the chunk's ``A_e[m] = E[X_e^m
1_pass]`` (``m <= R``, the observable's order) with the event weights ``ev_e``: a
function of the chunk's power sums about the payload's anchor ``a``, ``U_k = sum_e ev_e
E[(X_e - a)^k 1_pass]`` (``k <= R``; the moments above ``R`` are NaN in the state and
count as 0 in the payload, :func:`analysis.stats.pullback.sums_about`). So the chunk's
share ``L_c = <T_bar, T(U)>`` has ``dL/dU_k = g_k`` (:func:`_power_grads`: the gradient
of that small function, by JAX on ``R + 1`` numbers), and by the binomial expansion of
``(X - a)^k``

    dL/dA_e[m] = ev_e c_m,   c_m = sum_{k >= m} g_k C(k, m) (-a)^(k - m),
    dL/dev_e = sum_k g_k E[(X_e - a)^k 1_pass].

The cotangents ``dL/dA_e[m]`` go through the event sums' vector-Jacobian product
(:func:`analysis.pipeline.backends.numba.kernels._numba_esum_vjp.sums_vjp`: one sweep each
way per event).

Indexed observables (:func:`_leads`): the entries are the candidate tuples
(:mod:`analysis.pipeline.backends.numba._fastleading`): value ``x_a`` (and ``y_a``),
weight ``ev_e w(a)`` with ``w(a) = P(a leads the set and the event passes)``. The
payload's power sums are sums over entries, so each entry's cotangents are
:func:`analysis.pipeline.backends.numba._fastpayload.entry_cotangents`' ``(dL/dW, dL/dx,
dL/dy)``: ``dL/dw(a) = ev_e dL/dW``, ``dL/dev_e += sum_a w(a) dL/dW``, through the
candidates walk's vector-Jacobian product
(:func:`analysis.pipeline.backends.numba.kernels._numba_lead.candidates`).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline.backends.numba import _fastleading, _fastsens
from analysis.pipeline.backends.numba._fastmoments import _shift
from analysis.pipeline.backends.numba._fastpayload import entry_cotangents
from analysis.pipeline.backends.numba._fastpool import _run_blocks
from analysis.pipeline.backends.numba._fastrevhist import per_event
from analysis.pipeline.backends.numba.fastkernel import event_sum_inputs
from analysis.pipeline.backends.numba.kernels import _numba_esum_vjp, _numba_lead
from analysis.pipeline.plan import Plan
from analysis.stats._core import Moments
from analysis.stats.pullback import sums_about

__all__: list[str] = []  # internal to the numba kernel


@functools.cache
def _power_grads(order: int):
    """``g(u, a, t_bar)``: ``dL/dU`` of ``L = <t_bar, T>`` (``T``: the power sums about
    ``a`` of the state whose sums about ``a`` up to ``order`` are ``u``; module
    docstring)."""

    def loss(u, a, t_bar):
        w = u[0]
        ok = w != 0
        r = jnp.where(ok, u[1] / jnp.where(ok, w, 1.0), 0.0)  # mean - a
        m2 = u[2] - w * r * r
        m3 = u[3] - 3.0 * r * u[2] + 2.0 * w * r ** 3 if order >= 3 else jnp.nan
        m4 = (u[4] - 4.0 * r * u[3] + 6.0 * r * r * u[2] - 3.0 * w * r ** 4 if order >= 4
              else jnp.nan)
        t = sums_about(Moments(w, a, r, m2, m3, m4), a)
        return sum(t_bar[i] * t[i] for i in range(5))

    return jax.jit(jax.grad(loss))


def coefficients(read, a_e: np.ndarray, ev: np.ndarray, order: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(c, dev)``: ``c`` ``(R + 1,)`` with ``dL/dA_e[m] = ev_e c_m`` and ``dev`` ``(E,)``
    ``dL/dev_e`` of the payload's entry ``read`` (its anchor and cotangents) for an event
    sum of order ``order`` with moments ``a_e`` ``(E, >= order + 1)`` (module docstring).
    The power sums ``U`` are the finite events' (an event whose ``ev_e`` or ``a_e`` is
    non-finite counts 0), so a NaN event gives NaN in its own ``dev_e`` and, through
    its moments' Jacobian, in what it reaches, not in every event's ``c``: the JAX
    sweep's :func:`analysis.stats.pullback.finite_entries`."""
    a = float(read.a)
    a_e = np.asarray(a_e[:, : order + 1], np.float64)
    a0 = a_e[:, 0]
    own = np.where(a0 != 0, a_e[:, 1] / np.where(a0 != 0, a0, 1.0), 0.0)
    # about each event's own mean first, then about a (no cancellation of raw powers)
    s = _shift(_shift(a_e, -own), own - a)  # (E, R + 1) E[(X - a)^k 1]
    ok = np.isfinite(ev) & np.isfinite(s).all(axis=1)
    u = np.zeros(5)
    u[: order + 1] = np.where(ok, ev, 0.0) @ np.where(ok[:, None], s, 0.0)
    tb = np.asarray([float(t) for t in read.t_bar], np.float64)
    g = np.asarray(_power_grads(order)(jnp.asarray(u), jnp.float64(a), jnp.asarray(tb)),
                   np.float64)[: order + 1]
    c = np.array([sum(g[k] * math.comb(k, m) * (-a) ** (k - m) for k in range(m, order + 1))
                  for m in range(order + 1)])
    return c, s @ g


def _sums(reads: list, plan: Plan, sel, wt, gp: np.ndarray, dev: np.ndarray, dfs: np.ndarray,
          *, block: int, threads: int | None) -> None:
    """The event sums' share (module docstring) for the payload's ``reads`` of kinds
    ``sum``/``count`` (``plan`` without scores), added to ``gp`` ``(N, P)`` ``dL/dpi``,
    ``dev`` ``(E,)`` ``dL/dev_e`` and ``dfs`` ``(E, K)`` ``dL/d(count threshold)``:
    ``sel`` the selection (:func:`pull`: its tables, event weights times the soft branch
    cuts ``ev``), ``wt`` the value walk's
    :class:`~analysis.pipeline.backends.numba.fastkernel._Weights` (its per-event moments
    ``sa``, offsets ``coff``, fields ``flats``)."""
    coff, base, ins, ev = wt.coff, sel.base, sel.ins, sel.ev
    n_ev = coff.shape[1] - 1
    sums = [r.index for r in reads]
    sum_x, sum_has, binom = event_sum_inputs(plan, sel.tab, base, wt.flats, sums)
    cm = np.zeros((len(sums), n_ev, binom.shape[0]))
    for o, read in enumerate(reads):
        order = plan.sets.orders[read.index]
        c, d = coefficients(read, wt.sa[wt.sums.index(read.index), :, :, 0], ev, order)
        cm[o, :, : order + 1] = ev[:, None] * c
        dev += d
    if n_ev:
        args = (coff, base, ins.pv_all, ins.n_pat, ins.tgt, ins.f, ins.df, sum_x, sum_has,
                binom, cm, max(sel.max_seq, 1), block, gp, dfs)
        _run_blocks(_numba_esum_vjp.sums_vjp, args, max(1, -(-n_ev // block)), threads)


def _leads(reads: list, plan: Plan, wt, cols, ev: np.ndarray, dev: np.ndarray) -> dict:
    """The indexed observables' share (module docstring) for the payload's ``reads`` of
    kinds ``index``/``call`` (the arguments of :func:`_sums`; ``cols`` the chunk's
    columns): ``dL/dev_e`` added to ``dev``, and the candidates' ``dL/dw(a)`` per
    :func:`analysis.pipeline.backends.numba._fastleading.key` (their vector-Jacobian
    product: :func:`pull`)."""
    wq: dict = {}
    for read in reads:
        obs = plan.observables[read.index]
        k = _fastleading.key(obs.x)
        cand = wt.cands[k]
        counts = np.diff(cand.off)
        evq = np.repeat(ev, counts)
        x = _fastleading.values(obs.x, cand, plan, wt.flats, cols.events)
        y = (None if read.state == "moments"
             else _fastleading.values(obs.y, cand, plan, wt.flats, cols.events))
        w = cand.w[:, 0]
        dw, _, _ = entry_cotangents(read, x, y, evq * w)
        wq[k] = wq.get(k, 0.0) + evq * dw
        dev += per_event(counts, w * dw)
    return wq


def cands_vjp(cand: _fastleading.Candidates, coff: np.ndarray, ins: _fastsens.Inputs,
              wq: np.ndarray, gp: np.ndarray, dfs: np.ndarray, *, block: int,
              threads: int | None) -> None:
    """The candidates walk's vector-Jacobian product
    (:func:`analysis.pipeline.backends.numba.kernels._numba_lead.candidates`) of
    ``cand``'s tuples' ``wq`` ``(Q,)`` ``dL/dw(a)``, added to ``gp`` ``(N, P)`` ``dL/dpi``
    and ``dfs`` ``(E, K)`` (``coff``, ``ins``: the selection's offsets and tables with
    its pattern probabilities)."""
    n_ev = coff.shape[1] - 1
    if not n_ev:
        return
    args = (coff, ins.base, *cand.walked, ins.pv_all, 0.0, ins.pat, ins.n_pat, ins.tgt, ins.f,
            ins.df, cand.off, block, None, None, np.ascontiguousarray(wq, np.float64), gp, dfs)
    _run_blocks(_numba_lead.candidates, args, max(1, -(-n_ev // block)), threads)


#: the observable kinds pulled back here: event sums (:func:`_sums`), indexed (:func:`_leads`)
SUMS, LEADS = ("sum", "count"), ("index", "call")
KINDS = SUMS + LEADS


class Pulled(NamedTuple):
    """The observables' share of the chunk's cotangents (values, float64)."""

    dq: dict  # global set index -> (N_c,) dL/dq_js
    dev: np.ndarray  # (E,) dL/dev_e
    dcount: np.ndarray  # (K,) dL/d(trainable count threshold k)
    # (set, depth) -> the selection's candidates the value walk gave (shared: _revhistlead)
    cands: dict | None = None
    # (set, depth) -> (Q,) dL/dw(a) whose vector-Jacobian product :func:`pull` left to
    # the histograms of the same candidates (``defer``): one per (set, depth), theirs added
    wq: dict | None = None


def pull(reads: list, plan: Plan, sel, wt, cols, *, block: int, threads: int | None,
         defer: frozenset = frozenset()) -> Pulled:
    """The share of the payload's ``reads`` of kinds :data:`KINDS` (``plan`` without
    scores; ``sel`` its selection, :func:`analysis.pipeline.backends.numba.fastreverse._selection`:
    tables, each set's own probabilities, the event weights times the soft branch cuts;
    ``wt`` its value walk, :func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns`'
    ``keep``); the candidates of the keys ``defer`` without their vector-Jacobian product
    (:attr:`Pulled.wq`)."""
    coff, ins = wt.coff, sel.ins
    n_ev = coff.shape[1] - 1
    gp = np.zeros_like(ins.pv_all)
    dev = np.zeros(n_ev)
    dfs = np.zeros((n_ev, len(sel.counts_tr)))
    sums, leads = ([r for r in reads if plan.observables[r.index].x.kind in k]
                   for k in (SUMS, LEADS))
    if sums:
        _sums(sums, plan, sel, wt, gp, dev, dfs, block=block, threads=threads)
    wq = _leads(leads, plan, wt, cols, sel.ev, dev)  # (set, depth) -> (Q,) dL/dw(a)
    for k, w in wq.items():
        if k not in defer:
            cands_vjp(wt.cands[k], coff, ins, w, gp, dfs, block=block, threads=threads)
    return Pulled(ins.per_set(gp), dev, dfs.sum(axis=0), wt.cands,
                  {k: w for k, w in wq.items() if k in defer})
