"""Reverse mode's histograms of event sums (``sum(S.f)``, ``count(S)``) on the numba kernel.

Per event the forward kernel gives the bins' probabilities ``pb_eb = P(the region passes,
X_e in bin b)`` (hard bins: :func:`analysis.pipeline.backends.numba.kernels._numba_esum.event_sum_bins`;
soft bins: :func:`analysis.pipeline.backends.numba.kernels._numba_esum_soft.event_sum_soft_bins`),
and a histogram's share of the payload is ``L = sum_e ev_e sum_b c_eb pb_eb`` with the
event's bins' cotangents ``c_eb = sum_v (f_ve sbar_vb + f_ve^2 weight_e sbar2_vb)`` (as
:mod:`analysis.pipeline.backends.numba.kernels._numba_revhist`'s). So ``dL/dev_e = sum_b
c_eb pb_eb``, and the other cotangents are those of what ``pb`` reads: the objects' own
set probabilities ``q_js`` (through their pattern probabilities, multilinear in them:
:func:`analysis.pipeline.backends.numba._fastsens.set_sensitivities`), the trainable
count thresholds (the pass table) and the trainable edges (soft bins).

Hard bins: the values by one forward pass (no tangents), then one backward sweep per
event gives ``dL/dpi`` of every object and ``dL/df`` of the pass table
(:func:`analysis.pipeline.backends.numba.kernels._numba_esum_adj.event_sum_vjp`),
whatever the number of parameters. Soft bins (and an event with a NaN among its
probabilities) by the forward kernel's tangents: an event's ``pb_e`` reads its own
objects only (the Jacobian is block diagonal by event), so one pass with tangents
seeded per event gives many of its columns at once: tangent ``r`` of pass ``k`` is, in
every event, the derivative in that event's input ``3 k + r - 1`` (inputs numbered per
event: the trainable count thresholds and edges first, the same in every event, then
each object's sets, collection by collection), and ``dL/d(input) = ev_e sum_b c_eb
dpb_eb/d(input)`` by the kernel's own product rule. Passes: the busiest event's inputs
over 3 (the kernel's sparse path takes at most 3 tangents), each over the events that
have inputs left; memory: a pass's ``(E, bins, 4)``. The value states are the forward
pass's fill (:func:`analysis.pipeline.backends.numba.kernels._numba_esum_fill.fill_bins`).
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba._fastpool import _run_dynamic
from analysis.pipeline.backends.numba._fastsens import set_sensitivities
from analysis.pipeline.backends.numba._histfills import _factors, soft_width
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_esum
from analysis.pipeline.backends.numba.kernels._numba_esum_adj import event_sum_vjp
from analysis.pipeline.backends.numba.kernels._numba_esum_soft import event_sum_soft_bins
from analysis.pipeline.histplan import too_many_uncertain
from analysis.pipeline.plan import Plan
from analysis.select.certain import certain_objects
from analysis.stats.histogram import Histogram

__all__: list[str] = []  # internal to the numba kernel

#: the histogram kinds pulled back here
KINDS = ("sum", "count")
#: tangents per pass (the kernel's sparse path: at most 3)
TANGENTS = 3
#: events per block of the kernel
BLOCK = 1024


def _dpi(qs: list, codes: np.ndarray, n_pat: int, ls: int) -> np.ndarray:
    """``(N, n_pat)``: ``d pi_jp / d q_j,ls`` per object (``pi`` multilinear in the own
    set probabilities ``qs``, patterns' codes ``codes[p, ls]``:
    :func:`analysis.pipeline.backends.numba._fastsens.pattern_probabilities`)."""
    out = np.zeros((qs[ls].shape[0], n_pat))
    for p in range(n_pat):
        if codes[p, ls] < 0:
            continue
        t = np.full(qs[ls].shape[0], 1.0 if codes[p, ls] == 1 else -1.0)
        for other, q in enumerate(qs):
            if other != ls and codes[p, other] >= 0:
                t = t * (q if codes[p, other] == 1 else 1.0 - q)
        out[:, p] = t
    return out


def pull(fills: list, plan: Plan, cols, run: Plan, sel, ins, theta, widths, grad: np.ndarray,
         dev: np.ndarray, value: dict, *, threads: int | None = None) -> tuple[dict, np.ndarray]:
    """The fills of event sums of one selection (``sel``, ``run`` its plan without scores,
    ``ins`` its tables, :func:`analysis.pipeline.backends.numba._fastsens.inputs`; ``plan``:
    the pass's, for the weight variations): their value states into ``value``,
    ``dL/dev_e`` added to ``dev``, the trainable edges' cotangents to ``grad`` (one row);
    returns ``({global set: (N_c,) dL/dq_js}, (K,) dL/d(count threshold))``."""
    tab, coff, base = sel.tab, sel.coff, sel.base
    n_ev = sel.ev.shape[0]
    dq = {gs: np.zeros(int(coff[tab.collections.index(c), -1]))
          for gs, c in enumerate(tab.set_coll)}
    dcount = np.zeros(len(sel.counts_tr))
    weight = np.ascontiguousarray(cols.weight, dtype=np.float64)
    rows: dict = {}
    seeds = None  # the forward tangents' seeding, made when first needed
    pv3 = np.ascontiguousarray(ins.pv_all[:, :, None])
    for fill in fills:
        spec = fill.specs[0]
        node = spec.node
        coll = run.sets.collection_of(node.head)
        ci = tab.collections.index(coll)
        n_pat = int(tab.n_pat[ci])
        has = np.ascontiguousarray(tab.pat[ci, :, tab.local[node.head]] == 1, dtype=np.int64)
        cert, inside = certain_objects(ins.pv_all[base[ci]: base[ci + 1], :n_pat],
                                       has[:n_pat] == 1)
        n_obj = int(coff[ci, -1])
        if node.kind == "count":
            vals = np.ones(n_obj)
        else:
            vals = np.asarray(sel.flats[coll][node.field], np.float64)[:n_obj]
            vals = np.ascontiguousarray(np.abs(vals) if node.absolute else vals)
        edges = np.array(spec.edges_of(theta), np.float64)
        soft = soft_width(spec.width_index, widths)
        factors = _factors(plan, fill.specs, cols, weight, rows)
        c = factors.T @ fill.sbar + (factors * factors * weight).T @ fill.sbar2  # (E, B)
        cev = np.ascontiguousarray(c * sel.ev[:, None])
        fwd = _Forward(coff, base, pv3, tab.n_pat, ins, ci, has, cert, inside, vals, edges,
                       soft, threads)
        if soft > 0.0:
            todo = np.arange(n_ev)  # every event by the forward tangents, values first
        else:
            out, unc = fwd.run(np.arange(n_ev), np.zeros(ins.pv_all.shape + (_numba_dp.LANES,)),
                               np.zeros((ins.f.shape[0], _numba_dp.LANES)),
                               np.zeros(len(edges), np.int64), 1)
            _check(unc, spec, coll)
            _values(fill, out, sel.ev, factors, weight, value)
            dev += np.einsum("eb,eb->e", c, out[:, :, 0])
            todo = _adjoint(fwd, cev, tab.pat, dq, dcount)
        if todo.size:
            if seeds is None:
                seeds = _seeds(ins, tab, coff, base, n_ev)
            _tangents(fwd, todo, seeds, spec, coll, list(spec.edge_params or ()) if soft > 0.0
                      else [], cev, c, fill, sel.ev, factors, weight, value, dev, grad, dq,
                      dcount, soft > 0.0)
    return dq, dcount


class _Forward:
    """The forward kernel of one fill (hard or soft bins) over a subset of the events."""

    def __init__(self, coff, base, pv3, n_pat, ins, ci, has, cert, inside, vals, edges, soft,
                 threads) -> None:
        self.coff, self.base, self.pv3, self.n_pat, self.ins = coff, base, pv3, n_pat, ins
        self.ci, self.has, self.cert, self.inside, self.vals = ci, has, cert, inside, vals
        self.edges, self.soft, self.threads = edges, soft, threads

    def run(self, events: np.ndarray, pd_all: np.ndarray, df: np.ndarray, elane: np.ndarray,
            nl: int) -> tuple[np.ndarray, np.ndarray]:
        """``(out (len(events), bins, nl), n_unc)`` of the ``events`` with the objects'
        pattern tangents ``pd_all`` and the pass table's ``df`` (every object, lane 0
        zero) and the edges' lanes ``elane`` (soft bins)."""
        n_ev, ci = self.coff.shape[1] - 1, self.ci
        if events.size == n_ev:
            c_, b_, g_, o_ = self.coff, self.base, slice(None), slice(None)
        else:  # their objects (global g_, collection ci's own o_)
            c_, b_, g_ = _subset(self.coff, self.base, events)
            o_ = g_[b_[ci]: b_[ci + 1]] - self.base[ci]
        head = (c_, b_, np.ascontiguousarray(self.pv3[g_]), np.ascontiguousarray(pd_all[g_]),
                self.n_pat, self.ins.tgt, self.ins.f, df, ci, self.has,
                np.ascontiguousarray(self.cert[o_]), np.ascontiguousarray(self.inside[o_]),
                np.ascontiguousarray(self.vals[o_]), self.edges)
        o = np.zeros((events.size, len(self.edges) + 1, nl))
        u_ = np.zeros(events.size, np.int64)
        if self.soft > 0.0:
            kernel, args = event_sum_soft_bins, (*head, self.soft, elane, nl, BLOCK, o, u_)
        else:
            kernel, args = _numba_esum.event_sum_bins, (*head, nl, BLOCK, o, u_)
        if events.size:
            _run_dynamic(_numba_dp.compiled(kernel, args), args,
                         max(1, -(-events.size // BLOCK)), self.threads)
        return o, u_


def _check(unc: np.ndarray, spec, coll) -> None:
    """Refuse an event of more uncertain objects than the kernel enumerates."""
    top = int(unc.max(initial=0))
    if top > _numba_esum.MAX_UNCERTAIN:
        raise too_many_uncertain(spec, coll, int(np.argmax(unc)), top)


def _adjoint(fwd: _Forward, cev: np.ndarray, codes: np.ndarray, dq: dict,
             dcount: np.ndarray) -> np.ndarray:
    """Hard bins' cotangents by one backward sweep per event
    (:func:`analysis.pipeline.backends.numba.kernels._numba_esum_adj.event_sum_vjp`)
    added to ``dq`` and ``dcount``; returns the events it leaves to the forward
    tangents (a NaN among their probabilities)."""
    ins = fwd.ins
    n_ev = cev.shape[0]
    gp = np.zeros(ins.pv_all.shape)
    fbar = np.zeros((n_ev, ins.f.shape[0]))
    bad = np.zeros(n_ev, np.int64)
    g0 = np.ascontiguousarray(np.column_stack([ins.f, ins.df]))
    args = (fwd.coff, fwd.base, fwd.pv3, fwd.n_pat, ins.tgt, ins.f, g0, fwd.ci, fwd.has,
            fwd.cert, fwd.inside, fwd.vals, fwd.edges, cev, BLOCK, gp, fbar, bad)
    _run_dynamic(_numba_dp.compiled(event_sum_vjp, args), args, max(1, -(-n_ev // BLOCK)),
                 fwd.threads)
    for ci, (gsets, qs) in enumerate(ins.qs_of):
        n_pat = int(fwd.n_pat[ci])
        d = set_sensitivities(gp[fwd.base[ci]: fwd.base[ci + 1]], qs, codes[ci], n_pat)
        for gs, dd in zip(gsets, d, strict=True):
            dq[gs] += dd
    dcount += fbar.sum(axis=0) @ ins.df
    return np.flatnonzero(bad)


def _seeds(ins, tab, coff: np.ndarray, base: np.ndarray, n_ev: int) -> tuple:
    """The forward tangents' inputs: ``({global set: (N_c, P) d pi / d q}, (N,) each
    object's first input, (E,) each event's inputs)``, numbered per event after the
    count thresholds and edges (module docstring)."""
    dpi, first = {}, np.zeros(int(base[-1]), np.int64)
    n_in = np.zeros(n_ev, np.int64)
    for ci, (gsets, qs) in enumerate(ins.qs_of):
        counts = np.diff(coff[ci])
        local = np.arange(int(coff[ci, -1])) - np.repeat(coff[ci, :-1], counts)
        first[base[ci]: base[ci + 1]] = np.repeat(n_in, counts) + local * len(gsets)
        n_in += counts * len(gsets)
        for ls, gs in enumerate(gsets):
            dpi[gs] = _dpi(qs, tab.pat[ci], int(tab.n_pat[ci]), ls)
    return dpi, first, n_in


def _tangents(fwd: _Forward, todo: np.ndarray, seeds: tuple, spec, coll, eparams: list,
              cev: np.ndarray, c: np.ndarray, fill, ev: np.ndarray, factors: np.ndarray,
              weight: np.ndarray, value: dict, dev: np.ndarray, grad: np.ndarray, dq: dict,
              dcount: np.ndarray, with_values: bool) -> None:
    """The cotangents of the events ``todo`` by the forward kernel's tangents, seeded per
    event (module docstring), added to ``dq``, ``dcount`` and the edges' ``grad``;
    ``with_values`` (``todo``: every event): the value states and ``dev`` from the first
    pass."""
    ins, base, coff = fwd.ins, fwd.base, fwd.coff
    dpi, first, n_in = seeds
    n_ev = ev.shape[0]
    n_k = ins.df.shape[1]
    n_glob = n_k + len(eparams)
    n_pass = max(1, -(-(n_glob + int(n_in[todo].max(initial=0))) // TANGENTS))
    for k in range(n_pass):
        lo = k * TANGENTS  # this pass's inputs: lo .. lo + TANGENTS - 1
        pd_all = np.zeros(fwd.pv3.shape[:2] + (_numba_dp.LANES,))
        df = np.zeros((ins.f.shape[0], _numba_dp.LANES))
        elane = np.zeros(len(fwd.edges), np.int64)
        for u in range(lo, min(lo + TANGENTS, n_glob)):
            if u < n_k:
                df[:, 1 + u - lo] = ins.df[:, u]
            else:
                elane[u - n_k + 1] = 1 + u - lo
        for ci2, (gsets, _) in enumerate(ins.qs_of):
            for ls, gs in enumerate(gsets):
                u = n_glob + first[base[ci2]: base[ci2 + 1]] + ls
                on = np.flatnonzero((u >= lo) & (u < lo + TANGENTS))
                lane = (1 + u[on] - lo)[:, None]
                pd_all[base[ci2] + on[:, None], np.arange(dpi[gs].shape[1])[None, :],
                       lane] = dpi[gs][on]
        # the events with inputs left (the first pass: every one of todo)
        events = todo[n_glob + n_in[todo] > lo] if k else todo
        o, unc = fwd.run(events, pd_all, df, elane, TANGENTS + 1)
        if k == 0 and with_values:
            _check(unc, spec, coll)
            _values(fill, o, ev, factors, weight, value)
            dev += np.einsum("eb,eb->e", c, o[:, :, 0])
        t = np.zeros((n_ev, TANGENTS))  # dL/d(input) per event
        t[events] = np.einsum("eb,ebr->er", cev[events], o[:, :, 1:])
        for u in range(lo, min(lo + TANGENTS, n_glob)):
            if u < n_k:
                dcount[u] += t[:, u - lo].sum()
            else:
                grad[:, eparams[u - n_k]] += t[:, u - lo].sum()
        for ci2, (gsets, _) in enumerate(ins.qs_of):
            ev_of = np.repeat(np.arange(n_ev), np.diff(coff[ci2]))
            for ls, gs in enumerate(gsets):
                u = n_glob + first[base[ci2]: base[ci2 + 1]] + ls
                on = np.flatnonzero((u >= lo) & (u < lo + TANGENTS))
                dq[gs][on] += t[ev_of[on], u[on] - lo]


def _subset(coff: np.ndarray, base: np.ndarray, events: np.ndarray) -> tuple:
    """``(coff, base, objects)`` of the chunk's ``events`` alone: their offsets per
    collection, each collection's first global index, and the global indices of their
    objects (collection by collection, in order)."""
    coff_s = np.zeros((coff.shape[0], events.size + 1), np.int64)
    parts = []
    for c in range(coff.shape[0]):
        counts = np.diff(coff[c])[events]
        np.cumsum(counts, out=coff_s[c, 1:])
        parts.append(base[c] + np.repeat(coff[c, events] - coff_s[c, :-1], counts)
                     + np.arange(int(coff_s[c, -1])))
    base_s = np.zeros(coff.shape[0] + 1, np.int64)
    np.cumsum(coff_s[:, -1], out=base_s[1:])
    return coff_s, base_s, np.concatenate(parts)


def _values(fill, out: np.ndarray, ev: np.ndarray, factors: np.ndarray, weight: np.ndarray,
            value: dict) -> None:
    """The fill's value states from the bins' values ``out[:, :, 0]`` (the forward
    pass's fill, :func:`analysis.pipeline.backends.numba.kernels._numba_esum_fill.fill_bins`)."""
    n_b = out.shape[1]
    sumw = np.zeros((len(fill.specs), n_b, 1))
    sumw2 = np.zeros_like(sumw)
    _numba_esum.fill_bins(np.ascontiguousarray(out[:, :, :1]), np.ascontiguousarray(ev[:, None]),
                          np.ascontiguousarray(factors), weight, sumw, sumw2, 0, n_b)
    for v, s in enumerate(fill.specs):
        value[s.group][s.key] = Histogram(s.edges, sumw[v, :, 0], sumw2[v, :, 0])
