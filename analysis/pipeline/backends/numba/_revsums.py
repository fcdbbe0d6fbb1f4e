"""Reverse mode for event sums (``sum(S.f)``, ``count(S)``) on the numba kernel.

An event sum's state is :func:`analysis.stats._core.moments_from_expectations` of the
chunk's ``A_e[m] = E[X_e^m 1_pass]`` (``m <= R``, the observable's order) with the event
weights ``ev_e``: a function of the chunk's power sums about the payload's anchor ``a``,
``U_k = sum_e ev_e E[(X_e - a)^k 1_pass]`` (``k <= R``; the moments above ``R`` are NaN in
the state and count as 0 in the payload, :func:`analysis.stats.pullback.sums_about`). So
the chunk's share ``L_c = <T_bar, T(U)>`` has ``dL/dU_k = g_k`` (:func:`_power_grads`: the
gradient of that small function, by JAX on ``R + 1`` numbers), and by the binomial
expansion of ``(X - a)^k``

    dL/dA_e[m] = ev_e c_m,   c_m = sum_{k >= m} g_k C(k, m) (-a)^(k - m),
    dL/dev_e = sum_k g_k E[(X_e - a)^k 1_pass].

The cotangents ``dL/dA_e[m]`` go through the event sums' vector-Jacobian product
(:func:`analysis.pipeline.backends.numba.kernels._numba_esum_vjp.sums_vjp`: one sweep each way
per event) to each object's pattern probabilities and the trainable count thresholds'
pass table; the host chains the pattern probabilities to each set's own
probability as the pass probability's sensitivities
(:func:`analysis.pipeline.backends.numba._fastsens.set_sensitivities`,
:mod:`analysis.pipeline.backends.numba._revobs`). The per-event moments ``A``
come from the value walk (:func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns`,
which gives the chunk's value states too).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline.backends.numba import _fastsens
from analysis.pipeline.backends.numba._fastmoments import _shift
from analysis.pipeline.backends.numba._fastpool import _run_blocks
from analysis.pipeline.backends.numba.fastkernel import event_sum_inputs
from analysis.pipeline.backends.numba.kernels import _numba_esum_vjp
from analysis.pipeline.plan import Plan
from analysis.stats._core import Moments
from analysis.stats.pullback import sums_about

__all__: list[str] = []  # internal to the numba kernel

#: the observable kinds this module pulls back
KINDS = ("sum", "count")


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
    sum of order ``order`` with moments ``a_e`` ``(E, >= order + 1)`` (module docstring)."""
    a = float(read.a)
    a_e = np.asarray(a_e[:, : order + 1], np.float64)
    a0 = a_e[:, 0]
    own = np.where(a0 != 0, a_e[:, 1] / np.where(a0 != 0, a0, 1.0), 0.0)
    # about each event's own mean first, then about a (no cancellation of raw powers)
    s = _shift(_shift(a_e, -own), own - a)  # (E, R + 1) E[(X - a)^k 1]
    u = np.zeros(5)
    u[: order + 1] = ev @ s
    tb = np.asarray([float(t) for t in read.t_bar], np.float64)
    g = np.asarray(_power_grads(order)(jnp.asarray(u), jnp.float64(a), jnp.asarray(tb)),
                   np.float64)[: order + 1]
    c = np.array([sum(g[k] * math.comb(k, m) * (-a) ** (k - m) for k in range(m, order + 1))
                  for m in range(order + 1)])
    return c, s @ g


def add(reads: list, plan: Plan, tab, wt, ins: _fastsens.Inputs, base: np.ndarray,
        ev: np.ndarray, gp: np.ndarray, dev: np.ndarray, dfs: np.ndarray, *, max_seq: int,
        block: int, threads: int | None) -> None:
    """The event sums' share (module docstring) for the payload's ``reads`` of kinds
    ``sum``/``count`` (``plan`` without scores), added to ``gp`` ``(N, P)`` ``dL/dpi``,
    ``dev`` ``(E,)`` ``dL/dev_e`` and ``dfs`` ``(E, K)`` ``dL/d(count threshold)``:
    ``wt`` the value walk's :class:`~analysis.pipeline.backends.numba.fastkernel._Weights`
    (its per-event moments ``sa``, offsets ``coff``, fields ``flats``), ``ins`` the walk's
    tables (:func:`analysis.pipeline.backends.numba._fastsens.inputs`), ``base`` each
    collection's first global index, ``ev`` ``(E,)`` the event weights times the soft
    branch cuts. The summed values are data (an event sum reads a field ``S.f``, never a
    score's column)."""
    coff = wt.coff
    n_ev = coff.shape[1] - 1
    sums = [r.index for r in reads]
    sum_x, sum_has, binom = event_sum_inputs(plan, tab, base, wt.flats, sums)
    cm = np.zeros((len(sums), n_ev, binom.shape[0]))
    for o, read in enumerate(reads):
        order = plan.sets.orders[read.index]
        c, d = coefficients(read, wt.sa[wt.sums.index(read.index), :, :, 0], ev, order)
        cm[o, :, : order + 1] = ev[:, None] * c
        dev += d
    if n_ev:
        args = (coff, base, ins.pv_all, tab.n_pat, ins.tgt, ins.f, np.ascontiguousarray(ins.df),
                sum_x, sum_has, binom, cm, max(max_seq, 1), block, gp, dfs)
        _run_blocks(_numba_esum_vjp.sums_vjp, args, max(1, -(-n_ev // block)), threads)
