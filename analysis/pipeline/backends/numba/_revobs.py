"""Reverse mode for the observables without entries of their own on the numba kernel.

Event sums (:mod:`analysis.pipeline.backends.numba._revsums`) and indexed observables
(:mod:`analysis.pipeline.backends.numba._revlead`) read by a pullback payload: each adds
its cotangents of every object's pattern probabilities ``dL/dpi_jp`` (its walk's
vector-Jacobian product), of the event weights and of the trainable count thresholds;
:func:`pull` chains the pattern probabilities to each set's own probability
(``pi`` is multilinear in them: :func:`analysis.pipeline.backends.numba._fastsens.set_sensitivities`),
which :mod:`analysis.pipeline.backends.numba.fastreverse` chains to the cuts' thresholds
and score columns with the pass probability's share.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from analysis.pipeline.backends.numba import _fastsens, _revlead, _revsums
from analysis.pipeline.plan import Plan

__all__: list[str] = []  # internal to the numba kernel

#: the observable kinds pulled back here
KINDS = _revsums.KINDS + _revlead.KINDS


class Pulled(NamedTuple):
    """The observables' share of the chunk's cotangents (values, float64)."""

    dq: dict  # global set index -> (N_c,) dL/dq_js
    dev: np.ndarray  # (E,) dL/dev_e
    dcount: np.ndarray  # (K,) dL/d(trainable count threshold k)


def pull(reads: list, plan: Plan, tab, wt, cols, q_of: dict, theta: np.ndarray,
         widths: np.ndarray, counts_tr: tuple[int, ...], ev: np.ndarray, *, max_seq: int,
         block: int, threads: int | None) -> Pulled:
    """The share of the payload's ``reads`` of kinds :data:`KINDS` (``plan`` without
    scores; ``wt`` its value walk, :func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns`'
    ``keep``; ``q_of`` each set's own probabilities; ``ev`` ``(E,)`` the event weights
    times the soft branch cuts)."""
    coff = wt.coff
    n_ev = coff.shape[1] - 1
    base = np.zeros(coff.shape[0] + 1, np.int64)
    base[1:] = np.cumsum(coff[:, -1])
    ins = _fastsens.inputs(tab, plan.sets, base, q_of, theta, widths, counts_tr)
    gp = np.zeros_like(ins.pv_all)
    dev = np.zeros(n_ev)
    dfs = np.zeros((n_ev, len(counts_tr)))
    kind = {r.index: plan.observables[r.index].x.kind for r in reads}
    sums = [r for r in reads if kind[r.index] in _revsums.KINDS]
    leads = [r for r in reads if kind[r.index] in _revlead.KINDS]
    if sums:
        _revsums.add(sums, plan, tab, wt, ins, base, ev, gp, dev, dfs, max_seq=max_seq,
                     block=block, threads=threads)
    if leads:
        _revlead.add(leads, plan, tab, wt, cols, ins, base, ev, gp, dev, dfs,
                     block=block, threads=threads)
    dq = {}
    for ci, (gsets, qs) in enumerate(ins.qs_of):
        n_pat = int(tab.n_pat[ci])
        d = _fastsens.set_sensitivities(gp[base[ci]: base[ci + 1]], qs, tab.pat[ci], n_pat)
        dq.update(zip(gsets, d, strict=True))
    return Pulled(dq, dev, dfs.sum(axis=0))
