"""The numba kernel's fused loop for one collection with one object set (numba, float64).

The common selection (the README's demo, most configs): the objects of one collection,
one set of threshold cuts on them, count conditions on that set only. Its patterns are
"out" (probability ``1 - q_j``, adds nothing to any count) and "in" (``q_j``, moves
count state ``k`` to ``tgt[k]``), so :func:`analysis.pipeline.backends.numba.kernels._numba_dp.select`'s
recursions reduce to

- ``F_0 = delta_0``, ``F_{j+1}[k] = (1 - q_j) F_j[k]``, ``F_{j+1}[tgt[k]] += q_j F_j[k]``;
- ``G_n = f``, ``G_j[k] = (1 - q_j) G_{j+1}[k] + q_j G_{j+1}[tgt[k]]``, ``P = G_0[0]``;
- ``w_j = P(j in the set and the event passes) = q_j sum_k F_j[k] G_{j+1}[tgt[k]]``,

with the same forward-mode lanes (value, then one tangent per trainable parameter) and
the same operations in the same order, so the two loops agree to the last bits. Only the
chain of states ``0, tgt[0], tgt[tgt[0]], ...`` is ever reached (one pattern adds to
the counts), so the loop runs on that chain, ``tgt[i] = min(i + 1, L)``, and ``F_j``
(``G_j``, as far as it is read) on its first ``j + 1`` states only: the entries left
out are zeros that the general loop adds (the same floats). What the fusion saves: the
soft cuts' products and tangents are formed inside the event loop from their
probabilities (computed vectorised on the host; no per-object tangent arrays written and
read back between passes).

Why the loops are laid out as they are (each the same floats as the plain recursion,
measured on the demo's 100k-event chunks, one thread): the cuts are multiplied in cut
by cut over the event's objects (:func:`analysis.pipeline.backends.numba.kernels._numba_dp.cut_times`), not
object by object (a tangent lane stored and read back at once waits on the store:
2.4x slower); a state's two terms are summed in registers before one store
(:func:`~analysis.pipeline.backends.numba.kernels.walk.chain_forward`,
:func:`~analysis.pipeline.backends.numba.kernels.walk.chain_backward`: the walk's steps on
the chain); with weights, the forward chain of ``F`` and the backward chain of ``G``
advance in the same loop (two independent chains keep the core busy: each alone waits
on its own previous step), ``G_j`` is kept for every ``j``, and the weights follow in
a loop of their own.

One source, two variants (as :func:`~analysis.pipeline.backends.numba.kernels._numba_dp.select`):
:func:`select_one` with the tangents ``df`` a ``(states, LANES)`` array walks lanes;
with ``df = 0.0`` (values only: no trainable parameter, ``order=0``, hard cuts,
histograms) its buffers have no lane axis and every
step, the cut product and the outputs are lane 0's operations alone
(:mod:`~analysis.pipeline.backends.numba.kernels.lanes`): the same floats as lane 0 of
the variant with tangents.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._jit import njit
from analysis.pipeline.backends.numba.kernels._numba_dp import cut_product, inverse_width
from analysis.pipeline.backends.numba.kernels.lane_buffers import (
    lane_buffer,
    set_value,
    store_row,
    table_init,
    tangent_row,
    tangent_rows,
    weight_row,
)
from analysis.pipeline.backends.numba.kernels.lanes import LANES, zero_at
from analysis.pipeline.backends.numba.kernels.walk import chain_backward, chain_forward, weight

__all__ = ["select_one"]


@njit
def select_one(
    coff, ss, cut_w, cut_g, cut_par, f, df, want_w, max_seq, block, pe, ow, b0, b1,
):
    """Blocks ``b0:b1`` of events. ``coff``: ``(E + 1,)`` object offsets; ``ss``:
    ``(C, N)`` the cuts' probabilities per object
    (:func:`analysis.pipeline.backends.numba.kernels._numba_dp.soft_values`); per cut ``c``:
    width ``cut_w[c]``, ``cut_g[c]`` (``>``/``>=``), ``cut_par[c]`` (its threshold's lane
    - 1, or -1); ``f``, ``df``: the pass table and its tangents in lanes (lane 0 zero) on
    the chain of count states (``tgt[i] = min(i + 1, L)``, ``L + 1`` states), or
    ``df = 0.0`` for values only (module docstring; the other lanes of ``pe`` and ``ow``
    set to zero). Outputs in lanes: ``pe[e] = (P, dP)`` and, if ``want_w``, ``ow[j] =
    (w_j, dw_j)``."""
    n_ev = pe.shape[0]
    top = f.shape[0] - 1
    n_cuts = ss.shape[0]
    iw = np.empty(n_cuts)
    for c in range(n_cuts):
        iw[c] = inverse_width(cut_w[c])
    for b in range(b0, b1):
        q = np.empty(max_seq)
        dq = tangent_rows(max_seq, df)
        F = lane_buffer(max_seq + 1 if want_w else 1, top + 1, df)
        G = lane_buffer(max_seq + 1 if want_w else 2, top + 1, df)
        H = np.empty(LANES)
        states = np.arange(top + 1)
        chain = np.minimum(states + 1, top)  # tgt of the "in" pattern
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            o = coff[e]
            n = coff[e + 1] - o
            cut_product(ss, o, n, iw, cut_g, cut_par, q, dq)
            g = G[n] if want_w else G[0]
            for i in range(top + 1):
                table_init(g, i, f, df)
            if not want_w:
                Ga, Gb = G[0], G[1]
                for j in range(n - 1, -1, -1):
                    chain_backward(Ga, Gb, j, top, 1.0 - q[j], q[j], tangent_row(dq, j))
                    Ga, Gb = Gb, Ga
                store_row(pe[e], Ga[0])
                continue
            zero_at(F[0], 0)
            set_value(F[0], 0, 1.0)
            for s in range(n):  # two independent chains, one loop
                chain_forward(F[s], F[s + 1], s, top, 1.0 - q[s], q[s], tangent_row(dq, s))
                j = n - 1 - s
                chain_backward(G[j + 1], G[j], j, top, 1.0 - q[j], q[j], tangent_row(dq, j))
            for j in range(n):
                h = weight(H, F[j], G[j + 1], chain, states, min(j, top) + 1, 0, chain, False)
                weight_row(ow[o + j], q[j], H, h, tangent_row(dq, j))
            store_row(pe[e], G[0, 0])

