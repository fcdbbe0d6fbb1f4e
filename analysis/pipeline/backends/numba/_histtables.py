"""The joint pass tables of :mod:`analysis.pipeline.backends.numba.fasthist` (numpy; cached per plan).

One walk serves the selection and every channel region: their pass tables on one
joint count state space (:func:`_joint_tables`, once per parameter point through
:func:`_memo`: chunks and shift sides share it), the walk's static tables
(:func:`_joint_static`, :func:`_walk_static`), a region's plan (:func:`_region_plan`),
a per-plan memo by identity (:func:`_memo`) and the walk order of a collection's
objects in each variant (:func:`_order`: the nominal one wherever a shift keeps it; a
shift's columns are :func:`analysis.pipeline.scorecols.shifted`). Used by the numba
histogram host only.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

import numpy as np

from analysis.pipeline.backends.numba._fastpool import _run_blocks
from analysis.pipeline.backends.numba._fasttables import _pass_table, _reduced, _tables, _targets
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_hist
from analysis.pipeline.plan import Plan
from analysis.select.countmodel import CountModel

__all__: list[str] = []  # internal to the numba histogram kernel


_MEMO: dict[int, tuple[Plan, dict]] = {}


def _memo(plan: Plan, key: tuple, make):
    """``make()`` once per ``plan`` (by identity: hashing a plan hashes every spec in it,
    a measurable share of a pass with many templates) and ``key``; a few plans and
    entries kept (``_MEMO`` holds the plans, so no ``id`` is reused while kept)."""
    entry = _MEMO.get(id(plan))
    if entry is None or entry[0] is not plan:
        if len(_MEMO) >= 16:
            _MEMO.clear()
        entry = _MEMO[id(plan)] = (plan, {})
    table = entry[1]
    if key not in table:
        if len(table) >= 256:
            table.clear()
        table[key] = make()
    return table[key]


def _region_plan(plan: Plan, r: int) -> Plan:
    """``plan`` restricted to region ``r`` (0: the selection), without histograms."""
    if r == 0:
        return dataclasses.replace(plan, hists=())
    region = plan.regions[r - 1]
    return dataclasses.replace(plan, hists=(), sets=region.sets, event_cuts=region.event_cuts)


@lru_cache(maxsize=64)
def _joint_model(plan: Plan, regions: tuple[int, ...]) -> CountModel:
    """The count model of every condition of ``regions``: one state space for all."""
    counts = []
    for r in regions:
        for c in _region_plan(plan, r).sets.model.counts:
            if c not in counts:
                counts.append(c)
    return CountModel(plan.sets.model.sets, tuple(counts))


def _joint_tables(plan: Plan, regions, theta, widths, trainable):
    """``(model, caps, fs (R, S), dfs (R, S, LANES))``: each region's pass table
    (:func:`analysis.pipeline.backends.numba._fasttables._pass_fn`, its own definition) on the joint
    states, ``f_r(k) = f_r(min(k_v, cap_rv))`` (a region's table is constant above its
    caps, and the joint caps are the largest), then the caps lowered jointly
    (:func:`analysis.pipeline.backends.numba._fasttables._reduced`)."""
    model = _joint_model(plan, tuple(regions))
    grid = model._state_counts  # (S, V)
    var_of = {names: v for v, (names, _) in enumerate(model.variables)}
    n_par = len(trainable)
    cols = []
    for r in regions:
        sp = _region_plan(plan, r).sets
        m = sp.model
        if m.counts:
            f, df = _pass_table(sp, theta, widths, trainable)
            at = np.ravel_multi_index(
                tuple(np.minimum(grid[:, var_of[names]], cap) for names, cap in m.variables),
                m.shape)
            f, df = f[at], df[at]
        else:
            f, df = np.ones(model.n_states), np.zeros((model.n_states, n_par))
        cols.append((f, df))
    # every region's table and tangents side by side: the caps lowered for all at once
    both = np.concatenate([np.concatenate([f[:, None], df], axis=1) for f, df in cols], axis=1)
    caps, f0, rest = _reduced(model, both[:, 0], both[:, 1:])
    n = f0.shape[0]
    table = np.concatenate([f0[:, None], rest], axis=1).reshape(n, len(regions), n_par + 1)
    dfs = np.zeros((len(regions), n, _numba_dp.LANES))
    dfs[:, :, 1:n_par + 1] = table[:, :, 1:].transpose(1, 0, 2)
    return model, caps, np.ascontiguousarray(table[:, :, 0].T), dfs


@lru_cache(maxsize=64)
def _joint_static(plan: Plan, regions: tuple[int, ...]):
    """The numba tables of the joint model of ``regions``."""
    model = _joint_model(plan, regions)
    return _tables(dataclasses.replace(plan, hists=(),
                                       sets=dataclasses.replace(plan.sets, model=model)))


@lru_cache(maxsize=64)
def _walk_static(plan: Plan, regions: tuple[int, ...], caps: bytes, ld_keys: tuple):
    """``(tgt, ld_mask, ld_c, ld_ls, ld_d)`` of a walk: the joint model's targets under
    the caps ``caps`` (:func:`analysis.pipeline.backends.numba._fasttables._targets`), the
    states of each leading target ``(set, depth)`` of ``ld_keys``
    (:func:`analysis.pipeline.backends.numba.kernels._numba_hist.leading_support`) and the
    targets' collections, sets (position in their collection's patterns) and depths, once
    per plan, regions and caps (not per chunk and side)."""
    tab = _joint_static(plan, regions)
    tgt = _targets(_joint_model(plan, regions), np.frombuffer(caps, np.int64), tab.collections)
    specs = {s.name: s for s in plan.sets.sets}
    ld_c = np.array([tab.collections.index(specs[s].collection) for s, _ in ld_keys], np.int64)
    ld_ls = np.array([tab.local[s] for s, _ in ld_keys], np.int64)
    ld_d = np.array([d for _, d in ld_keys], np.int64)
    mask = _numba_hist.leading_support(tgt, tab.n_pat, tab.pat, ld_c, ld_ls, ld_d, tgt.shape[2])
    return tgt, mask, ld_c, ld_ls, ld_d


def _order(ranked: dict, c: str, rank: str, side, off: np.ndarray, flat: dict, blocks,
           threads) -> tuple[np.ndarray, Any]:
    """``(order, whose)``: collection ``c``'s objects by descending ``rank``
    (:func:`analysis.pipeline.backends.numba.kernels._numba_hist.rank_order`) in the variant ``side`` (None:
    the nominal columns, else its shift ``(column, factor)``; ``flat``: its fields), and
    whose order that is: the nominal one (None) wherever it still holds (a shift by a
    positive factor keeps it in all but rare near-ties: the variant's own order is the
    same array), else the variant's own (``side``). The nominal orders of one pass over
    the chunk are kept in ``ranked``; a variant's is sorted at each pass to know (a few
    objects per event: ~1 % of the systematics benchmark's pass, measured; keeping the
    answer with the chunk's columns took 70 lines)."""
    if side is None and (c, rank) in ranked:
        return ranked[c, rank], None
    out = np.empty(int(off[-1]), np.int64)
    key = np.ascontiguousarray(flat[rank], np.float64)
    _run_blocks(_numba_hist.rank_order, (off, key, out, blocks[0]), blocks[1], threads)
    if side is None:
        ranked[c, rank] = out
        return out, None
    nominal = ranked.get((c, rank))
    if nominal is not None and np.array_equal(out, nominal):
        return nominal, None
    return out, side
