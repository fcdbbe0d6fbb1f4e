"""Soft bins on the numba fill: the histogram sums of entries spread over the bins.

:func:`fill_soft` is :func:`analysis.pipeline.backends.numba.kernels._numba_fill.fill`
with each entry's weight spread over the bins by the probabilities of
:mod:`analysis.stats.softbins` (the JAX reference, :func:`analysis.stats.softbins.bin_probabilities`):
with ``z_j = (e_j - x) / W`` over the ``n + 1`` edges, the underflow takes
``sigmoid(z_0)``, bin ``k`` (``1..n``) ``sigmoid(z_k) - sigmoid(z_{k-1})`` (computed as
``sigmoid(-z_{k-1}) - sigmoid(-z_k)`` where ``z_k + z_{k-1} > 0``, the form without
cancellation, as the reference), the overflow ``sigmoid(-z_n)``. A non-finite ``x`` takes
its hard bin (NaN and ``+inf`` the overflow, ``-inf`` the underflow). Trainable edges:
``d q_k / d e_j = sigmoid'(z_j) / W`` for ``k = j`` and its negative for ``k = j + 1``,
added to the lane of ``e_j``'s parameter (``elane[j]``; 0: a fixed edge) times the
entry's probability. ``x`` itself carries no tangent on this backend (a learned score's
Jacobian runs in the JAX kernel: :mod:`analysis.pipeline.backends.numba.rules`).
"""

from __future__ import annotations

import math

import numpy as np

from analysis.select.lanes.policy import inline, njit

__all__ = ["bin_probabilities", "fill_soft"]


@inline
def _sigmoid(z):
    """The logistic function without overflow of ``exp``."""
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    ez = math.exp(z)
    return ez / (1.0 + ez)


@inline
def _probabilities(edges, x, width, q, ds):
    """The ``n + 2`` bin probabilities ``q`` of an entry at finite ``x`` and, per edge
    ``j``, ``ds[j] = d sigmoid(z_j) / d e_j``."""
    n_e = edges.shape[0]
    inv = 1.0 / width
    prev = (edges[0] - x) * inv
    s_prev = _sigmoid(prev)
    q[0] = s_prev
    ds[0] = s_prev * _sigmoid(-prev) * inv
    for j in range(1, n_e):
        z = (edges[j] - x) * inv
        s = _sigmoid(z)
        ds[j] = s * _sigmoid(-z) * inv
        if z + prev > 0.0:
            q[j] = _sigmoid(-prev) - _sigmoid(-z)
        else:
            q[j] = s - s_prev
        prev, s_prev = z, s
    q[n_e] = _sigmoid(-prev)


@inline
def bin_probabilities(edges, x, width, q, ds):
    """The ``n + 2`` bin probabilities ``q`` of an entry at ``x`` at the width ``width >
    0`` (module docstring) and, per edge ``j``, ``ds[j] = d sigmoid(z_j) / d e_j``;
    returns True. A non-finite ``x`` takes its hard bin (NaN and ``+inf`` the overflow,
    ``-inf`` the underflow; ``ds`` not written) and returns False: no tangent in the
    edges."""
    if math.isfinite(x):
        _probabilities(edges, x, width, q, ds)
        return True
    q[:] = 0.0
    q[0 if x < 0.0 else q.shape[0] - 1] = 1.0
    return False


@njit
def fill_soft(off, x, p, ev, factors, weight, edges, width, elane, sumw, sumw2):
    """Histogram sums of the entries of event ``e``, ``off[e]:off[e + 1]`` (values
    ``x[i]``, probability lanes ``p[i]``) with the event weights ``ev[e]`` (lanes) times
    each variation's factor ``factors[v, e]``, each entry spread over the bins at the
    soft bins' width ``width > 0`` (module docstring): ``sumw[v, b] += f (w q_b + w_0
    dq_b)``, ``sumw2[v, b] += f^2 weight[e] (w q_b + w_0 dq_b)`` with ``w = ev[e] p[i]``
    (the product rule in lanes) and ``dq_b`` the derivative in the lane of each
    trainable edge (``elane[j]``: its lane, below 1 a fixed edge), over the first ``sumw.shape[2]`` lanes. An entry of
    probability 0 is spread from ``x = 0`` (its value may be garbage, as the JAX
    kernel's). Entries in order: one sequential sum per bin and variation."""
    n_l = sumw.shape[2]
    n_b = sumw.shape[1]
    n_e = edges.shape[0]
    w = np.empty(n_l)
    q = np.empty(n_b)
    ds = np.empty(n_e)
    for e in range(off.shape[0] - 1):
        ev0 = ev[e, 0]
        we = weight[e]
        for i in range(off[e], off[e + 1]):
            p0 = p[i, 0]
            w[0] = (p0 * ev[e, 0] + ev0 * p[i, 0]) * 0.5
            for r in range(1, n_l):
                w[r] = p0 * ev[e, r] + ev0 * p[i, r]
            xi = x[i] if w[0] != 0.0 else 0.0
            soft = bin_probabilities(edges, xi, width, q, ds)
            for v in range(factors.shape[0]):
                f = factors[v, e]
                f2 = f * f * we
                for b in range(n_b):
                    qb = q[b]
                    o, o2 = sumw[v, b], sumw2[v, b]
                    for r in range(n_l):
                        o[r] += f * (w[r] * qb)
                        o2[r] += f2 * (w[r] * qb)
                if not soft:
                    continue
                for j in range(n_e):
                    r = elane[j]
                    if r < 1 or r >= n_l:
                        continue
                    d = w[0] * ds[j]
                    sumw[v, j, r] += f * d
                    sumw2[v, j, r] += f2 * d
                    sumw[v, j + 1, r] -= f * d
                    sumw2[v, j + 1, r] -= f2 * d
