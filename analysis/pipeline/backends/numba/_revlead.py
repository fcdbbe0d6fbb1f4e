"""Reverse mode for indexed observables (``S[i].f``, ``mass(S[0] + S[1])``) on the numba kernel.

An indexed observable's entries are its candidate tuples
(:mod:`analysis.pipeline.backends.numba._fastleading`): value ``x_a`` (and ``y_a``),
weight ``ev_e w(a)`` with ``w(a) = P(a leads the set and the event passes)``. The
payload's power sums are sums over entries, so each entry's cotangents are
:func:`analysis.pipeline.backends.numba._fastpayload.entry_cotangents`' ``(dL/dW, dL/dx,
dL/dy)``: ``dL/dw(a) = ev_e dL/dW``, ``dL/dev_e += sum_a w(a) dL/dW`` (the values are
data: an indexed expression reads fields, never a score's column). The candidates walk's vector-Jacobian product
(:func:`analysis.pipeline.backends.numba.kernels._numba_lead_vjp.lead_vjp`) turns the
``dL/dw(a)`` into each object's pattern probabilities' and the trainable count
thresholds' cotangents, which the host chains to the sets' own probabilities
(:mod:`analysis.pipeline.backends.numba._revobs`). The candidates, their weights and
values come from the value walk (:func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns`).
"""

from __future__ import annotations

from math import comb

import numpy as np

from analysis.pipeline.backends.numba import _fastleading, _fastsens
from analysis.pipeline.backends.numba._fastpayload import entry_cotangents
from analysis.pipeline.backends.numba._fastpool import _run_blocks
from analysis.pipeline.backends.numba.kernels import _numba_lead_vjp
from analysis.pipeline.plan import Plan

__all__: list[str] = []  # internal to the numba kernel

#: the observable kinds this module pulls back
KINDS = ("index", "call")


def add(reads: list, plan: Plan, tab, wt, cols, ins: _fastsens.Inputs, base: np.ndarray,
        ev: np.ndarray, gp: np.ndarray, dev: np.ndarray, dfs: np.ndarray, *, block: int,
        threads: int | None) -> None:
    """The indexed observables' share (module docstring) for the payload's ``reads`` of
    kinds ``index``/``call`` (``plan`` without scores), added to ``gp`` ``(N, P)``
    ``dL/dpi``, ``dev`` ``(E,)`` and ``dfs`` ``(E, K)``; ``wt``: the value walk's
    :class:`~analysis.pipeline.backends.numba.fastkernel._Weights` (its candidates),
    ``ins`` the walk's tables, ``base`` each collection's first global index, ``ev`` the
    event weights times the soft branch cuts."""
    coff, sp = wt.coff, plan.sets
    n_ev = coff.shape[1] - 1
    wbar: dict = {}  # (set, depth) -> (Q,) dL/dw(a)
    for read in reads:
        obs = plan.observables[read.index]
        k = _fastleading.key(obs.x)
        cand = wt.cands[k]
        per_event = np.diff(cand.off)
        evq = np.repeat(ev, per_event)
        x = _fastleading.values(obs.x, cand, plan, wt.flats, cols.events)
        y = (None if read.state == "moments"
             else _fastleading.values(obs.y, cand, plan, wt.flats, cols.events))
        w = cand.w[:, 0]
        dw, _, _ = entry_cotangents(read, x, y, evq * w)  # values: data, never a score
        wbar[k] = wbar.get(k, 0.0) + evq * dw
        dev += np.bincount(np.repeat(np.arange(n_ev), per_event), weights=w * dw,
                           minlength=n_ev)
    spec = {s.name: s for s in sp.sets}
    n_blocks = max(1, -(-n_ev // block))
    for (name, depth), wq in wbar.items():
        if not n_ev:
            continue
        ci = tab.collections.index(sp.collection_of(name))
        pd0 = np.zeros(ins.pv_all.shape + (1,))
        order, n_cand = _fastleading.ranked(tab, ci, spec[name], coff, base, wt.flats,
                                            ins.pv_all, pd0, block, n_blocks, threads)
        counts = np.diff(coff)
        own = counts[ci]
        k_top = int(n_cand.max(initial=0))
        max_ops = 2 * sum(comb(k_top, r + 1) for r in range(depth + 1)) + 1
        args = (coff, base, order, n_cand, ci, tab.local[name], depth, ins.pv_all, tab.pat,
                tab.n_pat, ins.tgt, ins.f, np.ascontiguousarray(ins.df),
                max(1, int(own.max(initial=0))), int((counts.sum(axis=0) - own).max(initial=0)),
                max_ops, wt.cands[(name, depth)].off, np.ascontiguousarray(wq, np.float64),
                block, gp, dfs)
        _run_blocks(_numba_lead_vjp.lead_vjp, args, n_blocks, threads)
