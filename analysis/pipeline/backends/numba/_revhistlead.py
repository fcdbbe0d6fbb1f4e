"""Reverse mode's histograms of leading objects (``S[d].f``) and candidate tuples on the numba kernel.

A histogram of ``S[d].f`` has one entry per object ``j`` of ``S``'s collection, fill weight
``ev_e lw_j`` with ``lw_j = P(j is S[d] and the region passes)``: the sum of the weights
``w(a)`` of the candidate tuples (:mod:`analysis.pipeline.backends.numba.kernels._numba_lead`)
whose last member is ``j``; one of candidate tuples
(:mod:`analysis.pipeline.backends.numba._histmulti`) has the tuples as entries (fill weight
``ev_e w(a)``; their values are data: no cotangent). From the entries' cotangents of the
fields' kernel (:func:`analysis.pipeline.backends.numba.kernels._numba_revhist.entry_cotangents`:
hard and soft bins, trainable edges, weight variations), every candidate's ``dL/dw(a) =
ev_e dL/dw_{a_d}`` (tuples: ``ev_e dL/dw_a``) goes through the walk's transpose to the
pattern probabilities and count thresholds, chained to the sets' own probabilities as the
indexed observables' are (:mod:`analysis.pipeline.backends.numba._revobs`); ``dL/dev_e +=
sum_j lw_j dL/dw_j``; a value that is a score's column and the trainable edges as the
fields' (:mod:`analysis.pipeline.backends.numba._fastrevhist`). Each selection (a shift
side, a channel region) is its own walk, as the fields': the value states equal the
forward kernel's up to the order of the sums.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from analysis.pipeline.backends.numba import (
    _fastleading,
    _fastrevhist,
    _histmulti,
    _revhistsums,
    _revobs,
)
from analysis.pipeline.backends.numba._fastrevhist import per_event
from analysis.pipeline.backends.numba._revobs import Pulled
from analysis.pipeline.plan import Plan

__all__: list[str] = []  # internal to the numba kernel

#: the histogram kinds whose states the numba reverse pass pulls back (fields, branches:
#: :mod:`analysis.pipeline.backends.numba._fastrevhist`; leading objects and candidate
#: tuples: here; event sums: :mod:`analysis.pipeline.backends.numba._revhistsums`)
KINDS = (*_fastrevhist.KINDS, "index", *_histmulti.KINDS, *_revhistsums.KINDS)
#: the kinds whose entries are the candidates of one ``(set, depth)``
_LEAD = ("index", *_histmulti.KINDS)
#: events per block of the candidates' walks
BLOCK = 1024


class Reads(_fastrevhist.Reads):
    """:class:`analysis.pipeline.backends.numba._fastrevhist.Reads` with the histograms of
    leading objects and event sums too (:meth:`pull`: their share of a selection's
    cotangents)."""

    def __init__(self, plan: Plan, hists: list) -> None:
        super().__init__(plan, hists)
        self.lead: dict = {}  # (shift, region) -> the fills of leading objects
        self.sums: dict = {}  # ... of event sums (analysis.pipeline.backends.numba._revhistsums)
        self._tuples: _Lead | None = None  # the candidates whose fills :meth:`_run` reads
        for sel, fills in self.fills.items():
            self.lead[sel] = [f for f in fills if f.specs[0].node.kind in _LEAD]
            self.sums[sel] = [f for f in fills if f.specs[0].node.kind in _revhistsums.KINDS]
            self.fills[sel] = [f for f in fills if f.specs[0].node.kind in _fastrevhist.KINDS]

    def _entries(self, spec, cols, run: Plan, sel) -> tuple:
        node = spec.node
        if node.kind in _histmulti.KINDS:  # the tuples of the walk being pulled (_leading)
            cand = self._tuples.cand
            x = _fastleading.values(node, cand, run, sel.flats, cols.events)
            return x, x, cand.off, None
        if node.kind != "index":
            return super()._entries(spec, cols, run, sel)
        coll = run.sets.collection_of(node.slots[0][0])
        off = sel.coff[sel.tab.collections.index(coll)]
        raw = np.asarray(sel.flats[coll][node.field], np.float64)[: int(off[-1])]
        return np.ascontiguousarray(np.abs(raw) if node.absolute else raw), raw, off, None

    def pulled_keys(self, key: tuple) -> frozenset:
        """The ``(set, depth)`` whose candidates the read fills of selection ``key`` pull
        back (one vector-Jacobian product each, in :meth:`pull`: the indexed observables
        of the same candidates leave theirs to it, :attr:`analysis.pipeline.backends.numba._revobs.Pulled.wq`)."""
        return frozenset(_fastleading.key(f.specs[0].node) for f in self.lead.get(key, ())
                         if f.read)

    def pull(self, key: tuple, cols, run: Plan, sel, theta, widths, grad: np.ndarray,
             bars: dict, dev: np.ndarray, by: Pulled | None, *,
             threads: int | None = None) -> Pulled | None:
        """The fills of leading objects and event sums of selection ``key`` (``sel``: its
        :func:`analysis.pipeline.backends.numba.fastreverse._selection`, ``run`` its plan
        without scores): their value states into :attr:`value`, ``dL/dev_e`` added to
        ``dev``, the values' and edges' cotangents to ``bars`` and ``grad`` (module
        docstrings); returns ``by`` (the other walks' share) plus theirs to the sets' own
        probabilities and the count thresholds (``by`` itself: none read)."""
        lead, sums = self.lead.get(key, ()), self.sums.get(key, ())
        if not lead and not sums:
            return by
        n_ev = sel.ev.shape[0]
        gp = np.zeros_like(sel.ins.pv_all)
        dfs = np.zeros((n_ev, len(sel.counts_tr)))
        # the nominal selection's candidates, where the value walk gave them, and the
        # indexed observables' cotangents of them left to this pass (_revobs)
        nominal = by is not None and key == (None, 0)
        read = self._leading(lead, cols, run, sel, theta, widths, grad, bars, dev, gp, dfs,
                             threads, by.cands or {} if nominal else {},
                             by.wq or {} if nominal else {})
        dq = sel.ins.per_set(gp)
        dcount = dfs.sum(axis=0)
        if sums:
            sq, sc = _revhistsums.pull(sums, self.plan, cols, run, sel, theta, widths, grad,
                                       dev, self.value, threads=threads)
            read = read or any(f.read for f in sums)
            dq = {gs: d + sq[gs] for gs, d in dq.items()}
            dcount = dcount + sc
        if not read:
            return by
        if by is None:
            return Pulled(dq, np.zeros(n_ev), dcount)
        return Pulled({gs: d + by.dq[gs] for gs, d in dq.items()}, by.dev, dcount + by.dcount)

    def _leading(self, fills, cols, run: Plan, sel, theta, widths, grad: np.ndarray,
                 bars: dict, dev: np.ndarray, gp: np.ndarray, dfs: np.ndarray,
                 threads: int | None, have: dict, seed: dict) -> bool:
        """The fills of leading objects (module docstring): ``dL/dpi`` into ``gp``, the
        count thresholds' per event into ``dfs``; whether any was read. ``have``: the
        selection's candidates already walked in this pass, per ``(set, depth)``;
        ``seed``: the indexed observables' ``dL/dw(a)`` of some of them (the sum's one
        vector-Jacobian product here)."""
        walks: dict = {}  # _fastleading.key -> its candidates (_Lead)
        pulled: set = set()  # the keys a read fill pulls back
        for f in fills:
            node = f.specs[0].node
            k = _fastleading.key(node)
            if k in have and k not in walks:  # one walk per key and pass
                c = have[k]
                walks[k] = _Lead(c, np.array(seed[k], np.float64) if k in seed
                                 else np.zeros(c.w.shape[0]))
            elif k not in walks:
                walks[k] = _candidates(k, run, sel, threads)
            lead = walks[k]
            tuples = node.kind in _histmulti.KINDS  # entries: the tuples, else the objects
            last = None if tuples else lead.cand.obj[:, k[1]]
            lw = (lead.cand.w[:, 0] if tuples else np.bincount(
                last, weights=lead.cand.w[:, 0], minlength=int(sel.coff[lead.cand.walked[2], -1])))
            self._tuples = lead
            # a score's column; a tuple's value is data (numba/_histmulti)
            bkey = None if tuples else f"{run.sets.collection_of(node.slots[0][0])}:{node.field}"
            done = self._fill(f, cols, run, sel, lw, theta, widths, grad, bars, bkey, {}, threads)
            if done is None:
                continue
            off, _, g = done
            pulled.add(k)
            lead.wq[:] += np.repeat(sel.ev, np.diff(lead.cand.off)) * (g if tuples else g[last])
            dev += per_event(np.diff(off), lw * g)
        for k, lead in walks.items():  # one per key (a 0 cotangent would meet a NaN event)
            if k in pulled:
                _revobs.cands_vjp(lead.cand, sel.coff, sel.ins, lead.wq, gp, dfs, block=BLOCK,
                                  threads=threads)
        return bool(pulled)


class _Lead(NamedTuple):
    """One ``(set, depth)``'s candidates on a selection's tables."""

    cand: _fastleading.Candidates  # the tuples, their weights (values in lane 0)
    wq: np.ndarray  # (Q,) the tuples' weights' cotangents (zeros: to be added)


def _candidates(k: tuple, run: Plan, sel, threads: int | None) -> _Lead:
    """The candidate tuples of :func:`analysis.pipeline.backends.numba._fastleading.key`
    ``k`` on the selection's tables and pattern probabilities, without tangents."""
    n_blocks = max(1, -(-(sel.coff.shape[1] - 1) // BLOCK))
    ins = sel.ins
    pd0, df0 = sel.zero_tangents
    cand = _fastleading.walk_key(k, run, sel.tab, sel.coff, sel.base, sel.flats, ins.pv_all,
                                 pd0, ins.tgt, ins.f, df0, BLOCK, n_blocks, threads)
    return _Lead(cand, np.zeros(cand.w.shape[0]))
