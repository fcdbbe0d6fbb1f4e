"""Indexed observables on the numba kernel: candidates, their weights and values.

An observable ``S[i].f``, ``mass(S[0] + S[1] + S[2])``, ``deltaR(S[0], S[1])`` or ``mt(S[0],
MET)`` of one indexed set ``S`` has one entry per candidate tuple of ``S``'s collection
(:func:`analysis.select.objects.leading`: its weight ``P(the tuple is S[0], ..., S[r] and
the event passes)``, its value the expression of the tuple's objects). :func:`walk` gives
each ``(set, depth)``'s candidates of a chunk from the walk of
:mod:`analysis.pipeline.backends.numba.kernels._numba_lead`, only the tuples of the
``k_e`` objects of event ``e`` that can be in the set (:func:`_possible`: ``C(k_e, r +
1)`` per event, where the JAX kernel carries ``C(K, r + 1)``, ``K`` the chunk's largest
``k_e``); :func:`values` their values by the expression kinds' own definitions
(:mod:`analysis.select.functions`, run eagerly on the candidates' columns). Two indexed
sets, of two collections (``mass(jets[0] + muons[0])``) or of one (``mass(bjets[0] +
jets[0])``): the pairs of their tuples, one walk; three sets stay on the JAX kernel
(:mod:`analysis.pipeline.backends.numba.rules`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from analysis.pipeline.backends.numba._fastpool import _run_blocks
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_hist, _numba_lead
from analysis.pipeline.plan import Plan
from analysis.select import functions
from analysis.select.leading import MAX_TUPLES, too_many_tuples

__all__: list[str] = []  # internal to the numba kernel


class Candidates(NamedTuple):
    """One :func:`key`'s candidates of a chunk: ``off`` ``(E + 1,)`` per event, ``w``
    ``(Q, LANES)`` weights with tangents, ``obj`` ``(Q, depth + 1)`` the tuple's objects
    (indices into the collection's flat columns, highest ranked first; two sets: the
    inner set's, then the outer's, :attr:`sets`)."""

    off: np.ndarray
    w: np.ndarray
    obj: np.ndarray
    sets: tuple[str, ...] = ()  # two indexed sets: their order in ``obj``'s columns
    #: the walk's arguments ``order ... depth2`` of
    #: :func:`~analysis.pipeline.backends.numba.kernels._numba_lead.candidates` (its
    #: transpose's too; ``order``: :func:`_possible_first`'s)
    walked: tuple = ()


def depths(node) -> dict[str, int]:
    """``{set: depth}`` of an indexed node's slots, in their first appearance's order."""
    out: dict[str, int] = {}
    for name, r in node.slots:
        out[name] = max(out.get(name, -1), r)
    return out


def key(node) -> tuple | None:
    """``(set, depth)`` of an indexed node of one set, ``((set, ...), (depth, ...))`` of
    one of several (``None`` for any other kind)."""
    if node is None or node.kind not in ("index", "call"):
        return None
    d = depths(node)
    if len(d) == 1:
        return node.slots[0][0], max(r for _, r in node.slots)
    return tuple(d), tuple(d.values())


def _comb(n: np.ndarray, k: int) -> np.ndarray:
    """``C(n, k)`` elementwise (int64, exact: each step is an exact division)."""
    out = np.ones_like(n)
    for i in range(k):
        out = out * (n - i) // (i + 1)
    return np.maximum(out, 0)


def _possible(tab, ci: int, name: str, base, pv_all, pd_all) -> np.ndarray:
    """``(N_c,)`` bool per object of collection ``ci`` (flat): whether it can be in set
    ``name``: some pattern holding the set has a probability or tangent other than
    exactly 0 (NaN counts as possible). An object that cannot gives every tuple holding
    it weight exactly 0 (values and tangents), so leaving it out is exact."""
    n_pat = int(tab.n_pat[ci])
    has = np.asarray(tab.pat[ci, :n_pat, tab.local[name]]) == 1
    lo, hi = int(base[ci]), int(base[ci + 1])
    pv = pv_all[lo:hi, :n_pat][:, has]
    pd = pd_all[lo:hi, :n_pat][:, has]
    return np.any(pv != 0, axis=1) | np.any(pd != 0, axis=(1, 2))


def _possible_first(order: np.ndarray, counts: np.ndarray, possible: np.ndarray):
    """``(order, k)``: each event's rank order with the objects that can be in the set
    first (both parts keep their rank order), and ``k`` ``(E,)`` how many those are."""
    ev = np.repeat(np.arange(len(counts)), counts)
    can = possible[order]
    perm = np.lexsort((np.arange(len(order)), ~can, ev))
    k = np.bincount(ev, weights=can, minlength=len(counts)).astype(np.int64)
    return np.ascontiguousarray(order[perm]), k


def ranked(tab, ci: int, spec, coff, base, flats: dict, pv_all, pd_all, block: int,
           n_blocks: int, threads: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``(order, n_cand)`` of set ``spec`` (of collection ``ci``): each event's objects
    in rank order, those that can be in the set first, and how many those are
    (:func:`_possible_first`)."""
    c = tab.collections[ci]
    order = np.empty(int(coff[ci, -1]), np.int64)
    _run_blocks(_numba_hist.rank_order, (coff[ci], np.ascontiguousarray(
        flats[c][spec.rank_by], np.float64), order, block), n_blocks, threads)
    return _possible_first(order, np.diff(coff[ci]), _possible(tab, ci, spec.name, base,
                                                               pv_all, pd_all))


def walk(plan: Plan, tab, coff, base, flats: dict, pv_all, pd_all, tgt, f, df_l, block: int,
         n_blocks: int, threads: int | None, *, nodes=None,
         have: dict | None = None) -> dict[tuple, Candidates]:
    """The candidates of every indexed observable of ``plan`` (per :func:`key`), or
    of the indexed ``nodes`` (the histograms of candidate tuples of one region, ``f``
    and ``df_l`` its pass table: :mod:`analysis.pipeline.backends.numba._histmulti`);
    those of ``have`` (the same tables' candidates) are taken from it."""
    out: dict[tuple, Candidates] = {}
    for node in [o.x for o in plan.observables] if nodes is None else nodes:
        k = key(node)
        if k is None or k in out:
            continue
        if have is not None and k in have:
            out[k] = have[k]
            continue
        out[k] = walk_key(k, plan, tab, coff, base, flats, pv_all, pd_all, tgt, f, df_l, block,
                          n_blocks, threads, slots=node.slots)
    return out


def walk_key(k: tuple, plan: Plan, tab, coff, base, flats: dict, pv_all, pd_all, tgt, f, df_l,
             block: int, n_blocks: int, threads: int | None, *, slots=None) -> Candidates:
    """The candidates of :func:`key` ``k`` (arguments as :func:`walk`'s); ``slots``: the
    expression's, to refuse more tuples than the JAX kernel's bound (None: unchecked)."""
    sp = plan.sets
    spec = {s.name: s for s in sp.sets}
    walks = []  # per indexed set: (name, depth, collection's position, order, n_cand)
    for name, depth in (zip(*k) if isinstance(k[0], tuple) else [k]):
        ci = tab.collections.index(sp.collection_of(name))
        walks.append((name, depth, ci, *ranked(tab, ci, spec[name], coff, base, flats, pv_all,
                                               pd_all, block, n_blocks, threads)))
    n_per = [_comb(n_cand, depth + 1) for _, depth, _, _, n_cand in walks]
    if slots is not None and not all(sp.collection_of(w[0]) in sp.caps for w in walks):
        # the JAX kernel's bound, on the objects that can be in each set
        tops = [int(w[4].max(initial=0)) for w in walks]
        n_tuples = int(np.prod([_comb(np.array([t]), w[1] + 1)[0]
                                for t, w in zip(tops, walks)]))
        if n_tuples > MAX_TUPLES:
            raise too_many_tuples(slots, {tab.collections[w[2]]: t
                                          for t, w in zip(tops, walks)}, n_tuples, MAX_TUPLES)
    if len(walks) == 2 and n_per[1].sum() > n_per[0].sum():
        walks.reverse()  # the outer set (walked once per tuple): the one with fewer
    name, depth, ci, order, n_cand = walks[0]
    name2, depth2, ci2, order2, n_cand2 = walks[-1] if len(walks) == 2 else (
        name, 0, -1, order, n_cand)
    off = np.zeros(len(n_cand) + 1, np.int64)
    np.cumsum(np.prod(n_per, axis=0), out=off[1:])
    w = np.zeros((int(off[-1]), _numba_dp.LANES))
    obj = np.zeros((int(off[-1]), depth + 1 + (depth2 + 1 if ci2 >= 0 else 0)), np.int64)
    walked = (order, n_cand, ci, tab.local[name], depth, order2, n_cand2, ci2, tab.local[name2],
              depth2)
    if len(n_cand):
        args = (coff, base, *walked, pv_all, pd_all, tab.pat, tab.n_pat, tgt, f, df_l, off, block,
                w, obj, None, None, None)
        _run_blocks(_numba_dp.compiled(_numba_lead.candidates, args), args, n_blocks, threads)
    return Candidates(off, w, obj, tuple(x[0] for x in walks) if ci2 >= 0 else (), walked)


def _column(cand: Candidates, node, k: int) -> int:
    """The column of ``cand.obj`` holding slot ``k`` of ``node``."""
    name, r = node.slots[k]
    if not cand.sets:
        return r
    d = depths(node)
    return r if name == cand.sets[0] else d[cand.sets[0]] + 1 + r


def values(node, cand: Candidates, plan: Plan, flats: dict, events: dict) -> np.ndarray:
    """The values of indexed ``node`` per candidate (float64; ``|x|`` for ``abs``), 0
    where the candidate's weight is 0 (as the JAX kernel: no value where no weight)."""
    if node.kind == "index":
        c = plan.sets.collection_of(node.slots[0][0])
        x: Any = flats[c][node.field][cand.obj[:, node.slots[0][1]]]
    else:
        per_event = np.diff(cand.off)

        def read(term: str, k: int | None, field: str):
            if k is None:  # a per-event object's branch, once per candidate
                return np.repeat(np.asarray(events[f"{term}.{field}"], np.float64), per_event)
            c = plan.sets.collection_of(node.slots[k][0])
            return flats[c][field][cand.obj[:, _column(cand, node, k)]]

        x = functions.apply(node.fn, node.args, read)
    x = np.asarray(x, dtype=np.float64)
    return np.where(cand.w[:, 0] != 0, np.abs(x) if node.absolute else x, 0.0)
