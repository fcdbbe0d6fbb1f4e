"""The pass probability's sensitivities to every object's set probabilities (host, numpy).

Reverse mode's walk (:mod:`analysis.pipeline.backends.numba.fastreverse`) for every count
model the forward kernel serves: several sets per collection (derived sets with their
parents), several collections, joint counts, trainable count thresholds. Per object
``j`` of collection ``c`` with own set probabilities ``q_js`` (the product of set
``s``'s own cuts), the pattern probabilities are ``pi_jp = prod_s a_jps`` with
``a_jps = q_js`` where pattern ``p`` holds ``s``, ``1 - q_js`` where it does not but
holds ``s``'s parent, 1 where ``s`` is unreachable (the codes of
:class:`analysis.pipeline.backends.numba._fasttables._Tables`, multiplied in set order
as :func:`analysis.pipeline.backends.numba.kernels._numba_fill.cut_patterns` does: the
same floats). One values-only walk per event
(:func:`analysis.pipeline.backends.numba.kernels._numba_sens.pattern_sensitivities`)
gives ``P_e``, ``H_jp = dP/dpi_jp`` and ``F_n . df`` (the trainable count thresholds);
then, by the chain rule (``pi`` is multilinear in the ``q_js``),

    dP/dq_js = sum_p H_jp (+1 | -1) prod_{s' != s, reachable} a_jps'

(``+1`` where ``p`` holds ``s``, ``-1`` where it holds only the parent; no division, so
``q = 0`` or ``1`` is exact), and the objects' weights ``P(j in s and the event passes)
= sum_{p holds s} pi_jp H_jp`` (pattern order, as the forward kernel adds them). Given cotangents of the pass
probabilities and of the objects' weights (a payload that reads observables of kinds
``S.f`` and branches), the same kernel runs the walk's vector-Jacobian product: one
backward sweep gives ``dL/dpi_jp``, chained to the sets as ``H`` above. Memory:
``(N, P)`` per chunk (``P``: the collection's patterns), whatever the number of
parameters.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from analysis.pipeline.backends.numba._fastpool import _run_blocks
from analysis.pipeline.backends.numba._fasttables import _Tables
from analysis.pipeline.backends.numba.kernels import _numba_sens

__all__: list[str] = []  # internal to the numba kernel


class Walk(NamedTuple):
    """What the reverse walk gives for one chunk (values, float64)."""

    pe: np.ndarray  # (E,) P(event passes)
    dq: dict  # global set index -> (N_c,) dP/dq_js (with cotangents: dL/dq_js)
    ow: dict  # global set index -> (N_c,) P(j in s and the event passes), sets asked for
    dfe: np.ndarray  # (E, K) dP/d(trainable count threshold k)
    dq_w: dict | None = None  # with the weights' cotangents: global set -> (N_c,) dL/dq_js
    dfw: np.ndarray | None = None  # with them: (E, K) dL/d(trainable count threshold k)


def pattern_probabilities(q: list[np.ndarray], codes: np.ndarray, n_pat: int,
                          n_obj: int) -> np.ndarray:
    """``(N, P)``: each object's pattern probabilities from its own set probabilities
    ``q[ls]`` (the collection's sets in order) and the pattern codes ``codes[p, ls]``."""
    pv = np.ones((n_obj, n_pat))
    for p in range(n_pat):
        for ls, qs in enumerate(q):
            code = codes[p, ls]
            if code >= 0:
                pv[:, p] *= qs if code == 1 else 1.0 - qs
    return pv


def set_sensitivities(hp: np.ndarray, q: list[np.ndarray], codes: np.ndarray,
                      n_pat: int) -> list[np.ndarray]:
    """``dP/dq_js`` for each set ``ls`` of the collection (module docstring) from
    ``hp[j, p] = dP/dpi_jp``."""
    out = [np.zeros(hp.shape[0]) for _ in q]
    for p in range(n_pat):
        reach = [ls for ls in range(len(q)) if codes[p, ls] >= 0]
        for ls in reach:
            term = hp[:, p] if codes[p, ls] == 1 else -hp[:, p]
            for other in reach:
                if other != ls:
                    a = q[other] if codes[p, other] == 1 else 1.0 - q[other]
                    term = term * a
            out[ls] += term
    return out


def object_weights(hp: np.ndarray, pv: np.ndarray, codes: np.ndarray, n_pat: int,
                   ls: int) -> np.ndarray:
    """``P(j in set ls and the event passes) = sum_{p holds ls} pi_jp H_jp`` (pattern
    order, from 0: the forward kernel's floats)."""
    acc = np.zeros(hp.shape[0])
    for p in range(n_pat):
        if codes[p, ls] == 1:
            acc = acc + pv[:, p] * hp[:, p]
    return acc


class Inputs(NamedTuple):
    """The walk's tables for one chunk's selection (:func:`inputs`)."""

    tgt: np.ndarray  # (C, P, S) the count state after an object of each pattern
    f: np.ndarray  # (S,) the pass table
    df: np.ndarray  # (S, K) its derivatives in the trainable count thresholds
    pv_all: np.ndarray  # (N, P) every object's pattern probabilities
    qs_of: list  # per collection: (global set indices, their own probabilities)
    base: np.ndarray  # (C + 1,) each collection's first global object index
    pat: np.ndarray  # (C, P, S_c) the pattern codes (_fasttables._Tables.pat)
    n_pat: np.ndarray  # (C,) each collection's patterns

    def per_set(self, hp: np.ndarray) -> dict:
        """``{global set: (N_c,) dP/dq_js}`` of every collection: :func:`set_sensitivities`
        of each collection's rows of ``hp`` (``(N, P)`` ``dP/dpi_jp``, or ``dL/dpi_jp``)."""
        out = {}
        for ci, (gsets, qs) in enumerate(self.qs_of):
            d = set_sensitivities(hp[self.base[ci]: self.base[ci + 1]], qs, self.pat[ci],
                                  int(self.n_pat[ci]))
            out.update(zip(gsets, d, strict=True))
        return out


def inputs(tab: _Tables, table: tuple, base: np.ndarray, q_of: dict) -> Inputs:
    """The tables the walks of reverse mode read (:func:`walk`'s ``ins``): ``table`` the
    walk's ``(tgt, f, df)`` (:func:`analysis.pipeline.backends.numba._fasttables.walk_table`),
    ``base`` ``(C + 1,)`` each collection's first global index, ``q_of[gs]`` the own
    probabilities ``(N_c,)`` of every set (global index ``gs``)."""
    n_tot = int(base[-1])
    tgt, f, df = table
    df = np.ascontiguousarray(df)  # the kernels' argument
    pv_all = np.zeros((max(n_tot, 1), tab.pat.shape[1]))
    qs_of = []
    for ci in range(len(tab.collections)):
        n_obj = int(base[ci + 1] - base[ci])
        gsets = [int(tab.coll_sets[ci, ls]) for ls in range(int(tab.n_coll_sets[ci]))]
        qs = [np.asarray(q_of[gs], np.float64)[:n_obj] for gs in gsets]
        qs_of.append((gsets, qs))
        n_pat = int(tab.n_pat[ci])
        pv_all[base[ci]: base[ci + 1], :n_pat] = pattern_probabilities(
            qs, tab.pat[ci], n_pat, n_obj)
    return Inputs(tgt, f, df, pv_all, qs_of, base, tab.pat, tab.n_pat)


def walk(coff: np.ndarray, ins: Inputs, want_w: set, *, max_seq: int, block: int,
         threads: int | None, wbar: dict | None = None) -> Walk:
    """The sensitivities' walk of one chunk (module docstring): ``coff`` ``(C, E + 1)``
    object offsets per collection, ``ins`` the walk's tables and
    pattern probabilities (:func:`inputs`), ``want_w`` the global set indices whose
    objects' weights are asked for. ``wbar`` given (``wbar[gs]``: ``(N_c,)``
    ``dL/dw_js``, the objects' weights' cotangents, for some sets): also the walk's
    vector-Jacobian product for them (``dq_w``, ``dfw``)."""
    n_ev = coff.shape[1] - 1
    tgt, f, df, pv_all, qs_of, base, pat, n_pat = ins
    n_tot = int(base[-1])
    p_max = pat.shape[1]
    n_k = df.shape[1]
    adjoint = wbar is not None
    cw = np.zeros((max(n_tot, 1) if adjoint else 1, p_max))
    for ci, (gsets, _) in enumerate(qs_of):
        for ls, gs in enumerate(gsets):
            if adjoint and wbar and gs in wbar:  # a pattern's cotangent: its sets' sum
                held = pat[ci, : int(n_pat[ci]), ls] == 1
                cw[base[ci]: base[ci + 1], : held.size] += np.outer(wbar[gs], held)
    pe = np.zeros(n_ev)
    hp = np.zeros((max(n_tot, 1), p_max))
    gp = np.zeros((max(n_tot, 1), p_max) if adjoint else (1, 1))
    dfe = np.zeros((n_ev, n_k))
    dfw = np.zeros((n_ev if adjoint else 0, n_k))
    if n_ev:
        args = (coff, base, pv_all, n_pat, tgt, f, df, cw, adjoint,
                max(max_seq, 1), block, pe, hp, dfe, gp, dfw)
        _run_blocks(_numba_sens.pattern_sensitivities, args, max(1, -(-n_ev // block)),
                    threads)
    ow = {}
    for ci, (gsets, _) in enumerate(qs_of):
        for ls, gs in enumerate(gsets):
            if gs in want_w:
                ow[gs] = object_weights(hp[base[ci]: base[ci + 1]],
                                        pv_all[base[ci]: base[ci + 1]], pat[ci],
                                        int(n_pat[ci]), ls)
    dq = ins.per_set(hp)
    dq_w = ins.per_set(gp) if adjoint else None
    return Walk(pe, dq, ow, dfe, dq_w, dfw if adjoint else None)
