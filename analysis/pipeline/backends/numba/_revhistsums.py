"""Reverse mode's histograms of event sums (``sum(S.f)``, ``count(S)``) on the numba kernel.

Per event the forward kernel gives the bins' probabilities ``pb_eb = P(the region passes,
X_e in bin b)`` (hard and soft bins:
:func:`analysis.pipeline.backends.numba.kernels._numba_esum.event_sum_bins`), and a
histogram's share of the payload is ``L = sum_e ev_e sum_b c_eb pb_eb`` with ``c_eb =
sum_v (f_ve sbar_vb + f_ve^2 weight_e sbar2_vb)`` (as
:mod:`analysis.pipeline.backends.numba.kernels._numba_revhist`'s). So ``dL/dev_e = sum_b
c_eb pb_eb``; the other cotangents are those of what ``pb`` reads: the objects' set
probabilities (through their pattern probabilities:
:func:`analysis.pipeline.backends.numba._fastsens.set_sensitivities`), the trainable
count thresholds and, soft bins, the trainable edges. The values by one forward pass
without tangents (its fill gives the value states), then one backward sweep per event
(:func:`analysis.pipeline.backends.numba.kernels._numba_esum_adj.event_sum_vjp`),
whatever the number of parameters; an event with a NaN among its probabilities too.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba._fastpool import _run_dynamic
from analysis.pipeline.backends.numba._histfills import _factors, event_sum_bins, soft_width
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_esum_fill
from analysis.pipeline.backends.numba.kernels._numba_esum_adj import event_sum_vjp
from analysis.pipeline.plan import Plan
from analysis.stats.histogram import Histogram

__all__: list[str] = []  # internal to the numba kernel

#: the histogram kinds pulled back here
KINDS = ("sum", "count")
#: events per block of the kernel
BLOCK = 1024


def pull(fills: list, plan: Plan, cols, run: Plan, sel, theta, widths, grad: np.ndarray,
         dev: np.ndarray, value: dict, *, threads: int | None = None) -> tuple[dict, np.ndarray]:
    """The fills of event sums of one selection (``sel``, ``run`` its plan without scores;
    ``plan``: the pass's, for the weight variations): their value states into ``value``,
    ``dL/dev_e`` added to ``dev``, the trainable edges' cotangents to ``grad`` (one row);
    returns ``({global set: (N_c,) dL/dq_js}, (K,) dL/d(count threshold))``."""
    tab, coff, ins = sel.tab, sel.coff, sel.ins
    n_ev = sel.ev.shape[0]
    dq = {gs: np.zeros(int(coff[tab.collections.index(c), -1]))
          for gs, c in enumerate(tab.set_coll)}
    dcount = np.zeros(len(sel.counts_tr))
    weight = np.ascontiguousarray(cols.weight, dtype=np.float64)
    rows: dict = {}
    objects: dict = {}  # which objects the kernel enumerates, per set
    # values only: no tangent, no lane of an edge
    pd0, df0 = sel.zero_tangents
    walk = (coff, sel.base, np.ascontiguousarray(ins.pv_all[:, :, None]), pd0, ins.n_pat,
            ins.tgt, ins.f, df0)
    for fill in fills:
        spec = fill.specs[0]
        # values in lane 0; four lanes: the hard kernel's sparse path adds four
        out = np.zeros((n_ev, len(spec.edges) + 1, 4))
        rest, _ = event_sum_bins(spec, run.sets, tab, walk, sel.flats, theta, widths, (), out,
                                 objects, block=BLOCK, threads=threads)
        factors = _factors(plan, fill.specs, cols, weight, rows)
        _values(fill, out, sel.ev, factors, weight, value)
        if not fill.read:
            continue  # the value states alone (_fastrevhist._Fill.read)
        c = factors.T @ fill.sbar + (factors * factors * weight).T @ fill.sbar2  # (E, B)
        dev += np.einsum("eb,eb->e", c, out[:, :, 0])
        soft = soft_width(spec.width_index, widths)
        ebar = _adjoint(walk, rest, soft, ins, np.ascontiguousarray(c * sel.ev[:, None]), dq,
                        dcount, threads)
        for j, par in enumerate(spec.edge_params or () if soft > 0.0 else (), start=1):
            grad[:, par] += ebar[:, j].sum()  # hard bins: the edges move no bin's value
    return dq, dcount


def _run(kernel, args: tuple, n_ev: int, threads: int | None) -> None:
    """``kernel`` over the chunk's events, in blocks of :data:`BLOCK` on the pool."""
    _run_dynamic(_numba_dp.compiled(kernel, args), args, max(1, -(-n_ev // BLOCK)), threads)


def _adjoint(walk: tuple, rest: tuple, soft: float, ins, cev: np.ndarray, dq: dict,
             dcount: np.ndarray, threads: int | None) -> np.ndarray:
    """The cotangents by one backward sweep per event
    (:func:`analysis.pipeline.backends.numba.kernels._numba_esum_adj.event_sum_vjp`;
    ``walk``, ``rest``: the forward kernel's arguments before and after ``cs``, ``ins``
    the selection's tables) added to ``dq`` and ``dcount``; returns ``(E, edges)`` the
    edges' ``dL/de`` per event (soft bins; ``(E, 0)`` hard bins)."""
    coff, base, pv3, _, n_pats, tgt, f, _ = walk
    n_ev = cev.shape[0]
    gp = np.zeros(ins.pv_all.shape)
    fbar = np.zeros((n_ev, ins.f.shape[0]))
    ebar = np.zeros((n_ev, len(rest[-1]) if soft > 0.0 else 0))
    g0 = np.ascontiguousarray(np.column_stack([ins.f, ins.df]))
    args = (coff, base, pv3, n_pats, tgt, f, g0, *rest, soft, cev, BLOCK, gp, fbar, ebar)
    _run(event_sum_vjp, args, n_ev, threads)
    for gs, dd in ins.per_set(gp).items():
        dq[gs] += dd
    dcount += fbar.sum(axis=0) @ ins.df
    return ebar


def _values(fill, out: np.ndarray, ev: np.ndarray, factors: np.ndarray, weight: np.ndarray,
            value: dict) -> None:
    """The fill's value states from the bins' values ``out[:, :, 0]`` (the forward
    pass's fill, :func:`analysis.pipeline.backends.numba.kernels._numba_esum_fill.fill_bins`,
    compiled as the forward pass compiles it: :func:`analysis.select.lanes.policy.vectorised`)."""
    n_b = out.shape[1]
    sumw = np.zeros((len(fill.specs), n_b, 1))
    sumw2 = np.zeros_like(sumw)
    args = (np.ascontiguousarray(out[:, :, :1]), np.ascontiguousarray(ev[:, None]),
            np.ascontiguousarray(factors), weight, sumw, sumw2, 0, n_b)
    _numba_dp.vectorised(_numba_esum_fill.fill_bins, args)(*args)
    for v, s in enumerate(fill.specs):
        value[s.group][s.key] = Histogram(s.edges, sumw[v, :, 0], sumw2[v, :, 0])
