"""The pass probability's sensitivity to each object's probability (numba, float64).

For one collection with one object set (the fused case of
:mod:`analysis.pipeline.backends.numba.kernels._numba_one`): with the object probabilities ``q_j``, the
forward distributions ``F_0 = delta_0``, ``F_{j+1}[k] = (1 - q_j) F_j[k]``,
``F_{j+1}[tgt k] += q_j F_j[k]`` and the value functions ``G_n = f``,
``G_j[k] = (1 - q_j) G_{j+1}[k] + q_j G_{j+1}[tgt k]`` (``tgt k = min(k + 1, L)`` on the
chain of count states), the event's pass probability is, for every ``j``,
``P = sum_k F_j[k] G_j[k]``, affine in ``q_j`` alone (``F_j`` and ``G_{j+1}`` do not
depend on it), so

    dP/dq_j = sum_k F_j[k] (G_{j+1}[tgt k] - G_{j+1}[k])          (exact)

and ``P = sum_k F_n[k] f[k]``: ``dP/df[k] = F_n[k]`` (the final count distribution,
for trainable count thresholds). The same walk gives the objects' weights
``w_j = P(j in the set and the event passes) = q_j sum_k F_j[k] G_{j+1}[tgt k]`` (the
value states' observables: the operations of
:func:`analysis.pipeline.backends.numba.kernels._numba_one.select_one` without tangents,
the same floats), so the chunk's value states need no walk of their own. Values only, one walk per event: the cost of
:func:`analysis.pipeline.backends.numba.kernels._numba_one.select_one` without tangents whatever the number of
parameters (reverse mode: :mod:`analysis.pipeline.backends.numba.fastreverse` chains it to the
cuts' thresholds and to the score columns). The steps of ``F`` and ``G`` are the chain's
of :mod:`analysis.pipeline.backends.numba.kernels.walk`.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._jit import njit
from analysis.pipeline.backends.numba.kernels.walk import chain_backward, chain_forward, weight

__all__ = ["sensitivities"]


@njit
def sensitivities(coff, q, f, want_w, max_seq, block, pe, dq, fn, ow, b0, b1):
    """Blocks ``b0:b1`` of events. ``coff``: ``(E + 1,)`` object offsets; ``q``: ``(N,)``
    object probabilities; ``f``: the pass table on the chain (``L + 1`` states). Outputs:
    ``pe[e] = P``, ``dq[j] = dP/dq_j``, ``fn[e] = F_n`` (``(E, L + 1)``) and, if
    ``want_w``, ``ow[j] = w_j`` (``(N,)``)."""
    n_ev = pe.shape[0]
    top = f.shape[0] - 1
    for b in range(b0, b1):
        F = np.zeros((max_seq + 1, top + 1))
        G = np.empty(top + 1)
        Gn = np.empty(top + 1)
        states = np.arange(top + 1)
        chain = np.minimum(states + 1, top)  # tgt of the "in" pattern
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            o = coff[e]
            n = coff[e + 1] - o
            F[0, 0] = 1.0
            for j in range(n):
                chain_forward(F[j], F[j + 1], j, top, 1.0 - q[o + j], q[o + j], 0.0)
            last = min(n, top)
            for i in range(top + 1):
                fn[e, i] = F[n, i] if i <= last else 0.0
                G[i] = f[i]
            for j in range(n - 1, -1, -1):
                last = min(j, top)
                h = 0.0
                for i in range(last + 1):
                    h += F[j, i] * (G[min(i + 1, top)] - G[i])
                dq[o + j] = h
                if want_w:
                    ow[o + j] = q[o + j] * weight(q, F[j], G, chain, states, last + 1, 0, chain,
                                                  False)
                chain_backward(G, Gn, j, top, 1.0 - q[o + j], q[o + j], 0.0)
                G, Gn = Gn, G
            pe[e] = G[0]
