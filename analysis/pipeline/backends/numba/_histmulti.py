"""Histograms of candidate tuples on the numba kernel: ``mass(S[0] + S[1])``, ``deltaR(S[0], S[1])``.

A histogram of an expression of several indexed objects (kind ``call``; of one set, or of
two whose tuples pair up: ``mass(jets[0] + muons[0])``) has one entry per candidate tuple
``a`` (:mod:`analysis.pipeline.backends.numba._fastleading`): fill weight ``ev_e w(a)``
with its tangents in lanes, value the expression of the tuple's objects; the JAX
reference's entries (:func:`analysis.pipeline.backends.jax.histkernel.histogram_states`).
:func:`candidates` walks each region's tuples on that region's pass table (region 0's
observables' candidates taken as they are), :func:`entries` gives them to the fills of
:mod:`analysis.pipeline.backends.numba._histfills`. Reverse mode:
:mod:`analysis.pipeline.backends.numba._revhistlead` (values are data: no cotangent).
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba import _fastleading, fastkernel
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan

__all__: list[str] = []  # internal to the numba kernel

#: the histogram kinds filled from candidate tuples
KINDS = ("call",)


def candidates(plan: Plan, specs, cands: dict, tab, coff, base, flats: dict, pv_all, pd_all,
               tgt, fs, dfs, rpos: dict, threads: int | None) -> dict:
    """``{(region, set, depth): Candidates}`` of the histograms of :data:`KINDS` among
    ``specs`` (region ``r``'s pass table ``fs[rpos[r]]``, tangents ``dfs[rpos[r]]``), on
    one variant's pattern probabilities ``pv_all[:, :, 0]`` and tangents ``pd_all``
    ``(N, P, LANES)``; ``cands``: region 0's candidates already walked (the
    observables')."""
    nodes: dict = {}
    for s in specs:
        if s.node.kind in KINDS:
            nodes.setdefault(s.region, []).append(s.node)
    if not nodes:
        return {}
    pv_all = np.ascontiguousarray(pv_all[:, :, 0])
    n_ev = coff.shape[1] - 1
    block, n_blocks = fastkernel.BLOCK, max(1, -(-n_ev // fastkernel.BLOCK))
    out: dict = {}
    for r, of in nodes.items():
        q = rpos[r]
        got = _fastleading.walk(plan, tab, coff, base, flats, pv_all, pd_all, tgt, fs[q],
                                dfs[q], block, n_blocks, threads, nodes=of,
                                have=cands if r == 0 else None)
        out.update({(r, *k): c for k, c in got.items()})
    return out


def entries(plan: Plan, node, region: int, wk: dict, cols: ChunkColumns
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, p, off)``: the candidate tuples of ``node`` in ``region`` of the walk ``wk``
    (:func:`candidates`, under ``"multi"``) on the columns ``cols``: their values, weights
    with tangents ``(Q, LANES)`` and each event's first tuple ``(E + 1,)``."""
    cand = wk["multi"][(region, *_fastleading.key(node))]
    x = _fastleading.values(node, cand, plan, wk["flats"], cols.events)
    return x, cand.w, cand.off
