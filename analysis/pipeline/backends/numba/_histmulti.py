"""Histograms of candidate tuples on the numba kernel: ``mass(S[0] + S[1])``, ``deltaR(S[0], S[1])``.

A histogram of an expression of several indexed objects of one set ``S`` (kind
``call``: ``mass(jets[0] + jets[1])``, ``pt(jets[0] + jets[1] + jets[2])``; or of two sets,
``mass(jets[0] + muons[0])``, ``mass(bjets[0] + jets[0])``: a tuple is then a pair of the
sets' tuples) has one entry per candidate tuple ``a`` of ``S``'s collection
(:mod:`analysis.pipeline.backends.numba._fastleading`): fill weight ``ev_e w(a)``, ``w(a)
= P(a is S[0], ..., S[r] and the histogram's region passes)`` with its tangents in
lanes, value the expression of the tuple's objects; the entries of the JAX reference
(:func:`analysis.pipeline.backends.jax.histkernel.histogram_states` over
:func:`analysis.select.objects.leading`). Forward: :func:`candidates` walks each
region's tuples on the histogram walk's pattern probabilities and that region's pass
table (:mod:`analysis.pipeline.backends.numba.fasthist`; the observables' candidates of
region 0 are the same and taken as they are), :func:`entries` gives them to the fills of
:mod:`analysis.pipeline.backends.numba._histfills` (hard and soft bins, trainable edges,
weight variations, as every other histogram's). Reverse mode:
:mod:`analysis.pipeline.backends.numba._revhistlead` (each tuple's weight cotangent from
its entry's). Values are data (:mod:`analysis.select.functions`: they read fields and
branches, no parameter), so no value has a cotangent.
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
