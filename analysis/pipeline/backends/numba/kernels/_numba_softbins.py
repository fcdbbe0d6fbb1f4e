"""The bins of one histogram entry on the numba kernels: its hard bin and its soft bins.

:func:`hard_bin` is :func:`numpy.searchsorted` (``side="right"``) over the edges: 0 the
underflow, NaN and ``>= edges[-1]`` in the overflow. :func:`bin_probabilities` spreads
an entry over the bins by the probabilities of :mod:`analysis.stats.softbins` (the JAX
reference, :func:`analysis.stats.softbins.bin_probabilities`): with ``z_j = (e_j - x) /
W`` over the ``n + 1`` edges, the underflow takes ``sigmoid(z_0)``, bin ``k``
(``1..n``) ``sigmoid(z_k) - sigmoid(z_{k-1})`` (computed as ``sigmoid(-z_{k-1}) -
sigmoid(-z_k)`` where ``z_k + z_{k-1} > 0``, the form without cancellation, as the
reference), the overflow ``sigmoid(-z_n)``; beside them their derivative in each edge,
``d q_k / d e_j = sigmoid'(z_j) / W`` for ``k = j`` and its negative for ``k = j + 1``.
A non-finite ``x`` takes its hard bin (NaN and ``+inf`` the overflow, ``-inf`` the
underflow). ``x`` itself carries no tangent in the forward fills (a learned score's
Jacobian runs in the JAX kernel: :mod:`analysis.pipeline.backends.numba.rules`); reverse
mode's pullback reads the derivative in ``x`` from the same ``ds``
(:mod:`analysis.pipeline.backends.numba.kernels._numba_revhist`). The fills:
:mod:`analysis.pipeline.backends.numba.kernels._numba_fill`.
"""

from __future__ import annotations

import math

from analysis.select.lanes.policy import inline

__all__ = ["bin_probabilities", "hard_bin"]


@inline
def hard_bin(edges, x):
    """The bin of ``x``: the number of edges ``<= x`` counted without branches (edges
    increase; ``numpy.searchsorted`` right: 0 the underflow), NaN in the overflow."""
    n_edges = edges.shape[0]
    b = n_edges
    if x == x:
        b = 0
        for k in range(n_edges):
            b += edges[k] <= x
    return b


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
