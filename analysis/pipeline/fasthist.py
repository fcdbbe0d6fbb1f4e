"""Soft histogram templates and their variations on the numba kernel.

:func:`evaluate_columns` returns what :func:`analysis.pipeline.fastkernel.evaluate_columns`
returns plus the ``histograms`` and ``templates`` groups of
:func:`analysis.pipeline.histkernel.histogram_states` (the JAX reference: the same
meaning, the same :class:`~analysis.stats.histogram.Histogram` states and Jacobians),
for every plan :func:`why_not` accepts: histograms of per-object fields (``S.f``,
``abs(S.f)``), leading objects (``S[i].f``: one indexed set) and per-event branches,
weight variations of per-event factors, shifts, and channel regions.

Per histogram ``sumw[b] = sum_entries w p [x in b]`` and ``sumw2[b] = sum w^2 p [x in b]``
(:mod:`analysis.stats.histogram`), ``w`` the event weight (x a weight variation's
factor) x the soft event cuts of the spec's region, ``p`` the entry's probability from
the walk of :mod:`analysis.pipeline._numba_hist`: ``P(j in S and the region passes)``,
``P(j is S[i] and the region passes)`` or ``P(the region passes)``. One walk per shift
side (the nominal columns, then each shifted column: cuts and observables move
together) serves every region at once: the regions share the objects' pattern
probabilities and differ only in the pass table, all mapped onto one joint count state
space (:func:`_joint_tables`). A weight variation reuses its walk's probabilities; only
its fill is new. Bins as :func:`numpy.searchsorted` (``side="right"``) over the edges:
underflow first, NaN and ``>= edges[-1]`` in the overflow; an entry of probability 0
is filled at ``x = 0`` (its value may be garbage; as the JAX kernel).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

import jax.numpy as jnp
import numpy as np

from analysis.pipeline import _numba_dp, _numba_hist, fastkernel
from analysis.pipeline._fasttables import _pass_fn, _reduced, _tables, _targets
from analysis.pipeline.fastkernel import (
    BLOCK,
    _event_weights,
    _par_index,
    _pattern_arrays,
    _run_blocks,
    _value,
)
from analysis.pipeline.histkernel import factor_values
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.select.countmodel import CountModel
from analysis.stats.histogram import Histogram

__all__ = ["evaluate_columns", "why_not"]

_KINDS = ("field", "branch", "index")


def _region_plan(plan: Plan, r: int) -> Plan:
    """``plan`` restricted to region ``r`` (0: the selection), without histograms."""
    if r == 0:
        return dataclasses.replace(plan, hists=())
    region = plan.regions[r - 1]
    return dataclasses.replace(plan, hists=(), sets=region.sets, event_cuts=region.event_cuts)


def why_not(plan: Plan, order: int, theta: Any = None) -> str | None:
    """``None`` when :func:`evaluate_columns` computes ``plan`` (with histograms) at
    ``order`` (and ``theta``), else the reason (``--debug`` logs it)."""
    for r in range(len(plan.regions) + 1):
        sub = _region_plan(plan, r)
        why = fastkernel.why_not(sub, order, theta)
        if why is not None:
            return why if r == 0 else f"channel region {plan.regions[r - 1].name!r}: {why}"
        if r and (sub.sets.sets != plan.sets.sets or sub.sets.model.sets != plan.sets.model.sets):
            return (f"channel region {plan.regions[r - 1].name!r} on other object sets than "
                    "the selection (the numba histograms walk one set of objects)")
    rank: dict[str, str] = {}
    specs = {s.name: s for s in plan.sets.sets}
    for spec in plan.hists:
        node = spec.node
        if node.kind not in _KINDS or (node.kind == "index" and len(node.slots) != 1):
            what = "an event sum (subset enumeration)" if node.kind in ("sum", "count") else (
                f"a {node.kind} expression")
            return (f"histogram {spec.key!r}: x = {node.text!r} is {what}; the numba kernel "
                    "fills per-object fields, one leading object and branches")
        if node.kind == "index":
            s = specs[node.slots[0][0]]
            if rank.setdefault(s.collection, s.rank_by) != s.rank_by:
                return (f"histogram {spec.key!r}: sets of {s.collection} indexed by two "
                        "ranking fields (the numba walk takes one order per collection)")
        if spec.weight is not None and plan.weights[spec.weight].sf is not None:
            return (f"histogram {spec.key!r}: a per-object scale factor (runs in the JAX "
                    "kernel)")
    return None


# --- the joint pass tables --------------------------------------------------------------


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
    (:func:`analysis.pipeline._fasttables._pass_fn`, its own definition) on the joint
    states, ``f_r(k) = f_r(min(k_v, cap_rv))`` (a region's table is constant above its
    caps, and the joint caps are the largest), then the caps lowered jointly
    (:func:`analysis.pipeline._fasttables._reduced`)."""
    model = _joint_model(plan, tuple(regions))
    grid = model._state_counts  # (S, V)
    var_of = {names: v for v, (names, _) in enumerate(model.variables)}
    n_par = len(trainable)
    cols = []
    for r in regions:
        sp = _region_plan(plan, r).sets
        m = sp.model
        if m.counts:
            th = np.array([_value(theta, p, v) for p, v in sp.thresholds])
            cw = np.array([0.0 if i is None else widths[i] for i in sp.count_widths])
            f_j, slope = _pass_fn(m)(jnp.asarray(th), jnp.asarray(cw))
            f, slope = np.asarray(f_j, np.float64), np.asarray(slope, np.float64)
            df = np.zeros((f.shape[0], n_par))
            for i, (param, _) in enumerate(sp.thresholds):
                k = _par_index(trainable, param)
                if k >= 0:
                    df[:, k] += slope[:, i]
            at = np.ravel_multi_index(
                tuple(np.minimum(grid[:, var_of[names]], cap) for names, cap in m.variables),
                m.shape)
            f, df = f[at], df[at]
        else:
            f, df = np.ones(model.n_states), np.zeros((model.n_states, n_par))
        cols.append((f, df))
    rest = np.concatenate([np.concatenate([f[:, None], df], axis=1) for f, df in cols[1:]]
                          + [np.zeros((model.n_states, 0))], axis=1)
    caps, f0, dall = _reduced(model, cols[0][0], np.concatenate([cols[0][1], rest], axis=1))
    n = f0.shape[0]
    fs = np.empty((len(regions), n))
    dfs = np.zeros((len(regions), n, _numba_dp.LANES))
    fs[0], dfs[0, :, 1:n_par + 1] = f0, dall[:, :n_par]
    for q in range(1, len(regions)):
        a = n_par + (q - 1) * (n_par + 1)
        fs[q] = dall[:, a]
        dfs[q, :, 1:n_par + 1] = dall[:, a + 1: a + 1 + n_par]
    return model, caps, fs, dfs


# --- one walk ------------------------------------------------------------------------


def _shifted(cols: ChunkColumns, key: str, factor: float) -> ChunkColumns:
    """``cols`` with the column ``key`` (``C:f`` or ``event:K``) times ``factor`` (new
    dicts: the cached columns are not touched)."""
    head, name = key.split(":", 1)
    if head == "event":
        return dataclasses.replace(cols, events={**cols.events, name: cols.events[name] * factor})
    counts, flat = cols.collections[head]
    return dataclasses.replace(
        cols, collections={**cols.collections, head: (counts, {**flat, name: flat[name] * factor})})


def _walk(cols: ChunkColumns, plan: Plan, specs, theta, widths, trainable, threads):
    """One walk on ``cols`` for the histogram ``specs`` (one shift side): per region
    ``pe[r]`` ``(E, LANES)``, per ``(region, set)`` object weights and per ``(region,
    set, depth)`` leading weights ``(N, LANES)`` by global object index, the objects'
    offsets and flat fields."""
    regions = sorted({0} | {s.region for s in specs})
    rpos = {r: q for q, r in enumerate(regions)}
    model, caps, fs, dfs = _joint_tables(plan, regions, theta, widths, trainable)
    tplan = dataclasses.replace(plan, hists=(), sets=dataclasses.replace(plan.sets, model=model))
    tab = _tables(tplan)
    n_ev = int(cols.n_events)
    n_coll = len(tab.collections)
    coff = np.zeros((n_coll, n_ev + 1), np.int64)
    base = np.zeros(n_coll + 1, np.int64)
    flats, max_seq = {}, 0
    for ci, c in enumerate(tab.collections):
        fields = dict(plan.sets.fields).get(c, ())
        counts, flat = cols.collections.get(
            c, (np.zeros(n_ev, np.int64), {f_: np.zeros(0) for f_ in fields}))
        flats[c] = flat
        np.cumsum(counts, out=coff[ci, 1:])
        base[ci + 1] = base[ci] + coff[ci, -1]
        max_seq += int(np.max(counts, initial=0))
    n_tot = int(base[-1])
    setspec = {s.name: s for s in plan.sets.sets}
    ow_keys: list[tuple[int, str]] = []
    ld_keys: list[tuple[str, int]] = []
    lw_keys: list[tuple[int, str, int]] = []
    rankidx = np.arange(n_tot, dtype=np.int64)
    for spec in specs:
        node = spec.node
        if node.kind == "field" and (spec.region, node.head) not in ow_keys:
            ow_keys.append((spec.region, node.head))
        elif node.kind == "index":
            s, d = node.slots[0]
            if (s, d) not in ld_keys:
                ld_keys.append((s, d))
            if (spec.region, s, d) not in lw_keys:
                lw_keys.append((spec.region, s, d))
    for c in {setspec[s].collection for s, _ in ld_keys}:
        ci = tab.collections.index(c)
        rank = next(setspec[s].rank_by for s, _ in ld_keys if setspec[s].collection == c)
        ev_of = np.repeat(np.arange(n_ev), np.diff(coff[ci]))
        # per event, descending rank, ties in the original order (np.lexsort is stable)
        rankidx[base[ci]: base[ci + 1]] = base[ci] + np.lexsort(
            (-np.asarray(flats[c][rank], dtype=np.float64), ev_of))
    pv_all, pd_all = _pattern_arrays(tab, coff, base, flats, theta, widths, trainable)
    tgt = _targets(model, caps, tab.collections)
    lanes = _numba_dp.LANES

    def ci_ls(s):
        return tab.collections.index(setspec[s].collection), tab.local[s]

    ow_c = np.array([ci_ls(s)[0] for _, s in ow_keys], np.int64)
    ow_ls = np.array([ci_ls(s)[1] for _, s in ow_keys], np.int64)
    ld_c = np.array([ci_ls(s)[0] for s, _ in ld_keys], np.int64)
    ld_ls = np.array([ci_ls(s)[1] for s, _ in ld_keys], np.int64)
    ld_d = np.array([d for _, d in ld_keys], np.int64)
    pe = np.zeros((len(regions), n_ev, lanes))
    ow = np.zeros((len(ow_keys), n_tot, lanes))
    lw = np.zeros((len(lw_keys), n_tot, lanes))
    if n_ev:
        args = (coff, base, rankidx, pv_all, pd_all, tab.pat, tab.n_pat, tgt, fs, dfs,
                len(trainable) + 1,
                np.array([rpos[r] for r, _ in ow_keys], np.int64), ow_c, ow_ls, ld_c, ld_ls, ld_d,
                np.array([rpos[r] for r, _, _ in lw_keys], np.int64),
                np.array([ld_keys.index((s, d)) for _, s, d in lw_keys], np.int64),
                max(max_seq, 1), int(ld_d.max(initial=0)), BLOCK, pe, ow, lw)
        _run_blocks(_numba_dp.compiled(_numba_hist.walk, args), args, max(1, -(-n_ev // BLOCK)), threads)
    return {
        "pe": {r: pe[rpos[r]] for r in regions},
        "ow": {k: ow[i] for i, k in enumerate(ow_keys)},
        "lw": {k: lw[i] for i, k in enumerate(lw_keys)},
        "coff": coff, "base": base, "flats": flats, "collections": tab.collections,
    }


def _times(a: np.ndarray, b: np.ndarray, nl: int) -> np.ndarray:
    """The lane product ``(a b, a' b + a b')`` of ``(n, LANES)`` arrays (``nl`` lanes)."""
    out = np.empty((a.shape[0], nl))
    out[:, 0] = a[:, 0] * b[:, 0]
    out[:, 1:] = a[:, 1:nl] * b[:, :1] + a[:, :1] * b[:, 1:nl]
    return out


def _fill(x: np.ndarray, w: np.ndarray, w_event: np.ndarray, edges) -> tuple:
    """``(value, jac)`` :class:`Histogram` states of entries ``x`` with weights ``w``
    (``(n, nl)`` lanes) and the entries' event weights ``w_event`` (for ``sumw2``)."""
    nb = len(edges) + 1
    x = np.where(w[:, 0] != 0, x, 0.0)
    idx = np.searchsorted(np.asarray(edges, dtype=np.float64), x, side="right")
    w2 = w * w_event[:, None]
    sumw = np.stack([np.bincount(idx, weights=w[:, r], minlength=nb) for r in range(w.shape[1])],
                    axis=1)
    sumw2 = np.stack([np.bincount(idx, weights=w2[:, r], minlength=nb)
                      for r in range(w.shape[1])], axis=1)
    return Histogram(edges, sumw[:, 0], sumw2[:, 0]), Histogram(edges, sumw[:, 1:], sumw2[:, 1:])


def evaluate_columns(
    cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, *, order: int = 1,
    threads: int | None = None,
) -> tuple[dict, dict | None]:
    """``(value, jac)`` of one chunk with its histogram states, as
    :func:`analysis.pipeline.kernel.evaluate_chunk` returns them (numpy float64; ``jac``
    None for ``order=0``); ``plan`` must pass :func:`why_not`."""
    why = why_not(plan, order, theta)
    if why is not None:
        raise ValueError(f"fasthist: {why}")
    theta = np.asarray(theta, dtype=np.float64).reshape(-1)
    widths = np.asarray(widths, dtype=np.float64).reshape(plan.n_widths)
    trainable = plan.trainable if order >= 1 else ()
    nl = len(trainable) + 1
    n_ev = int(cols.n_events)
    groups: dict[int | None, list] = {None: []}
    for spec in plan.hists:
        groups.setdefault(spec.shift, []).append(spec)
    value: dict[str, Any] = {"observables": {}, "histograms": {}, "templates": {}}
    jac: dict[str, Any] = {"observables": {}, "histograms": {}, "templates": {}}
    weight = np.asarray(cols.weight, dtype=np.float64)
    for shift, specs in groups.items():
        c = cols
        if shift is not None:
            sh = plan.shifts[shift]
            c = _shifted(cols, sh.key, sh.factor)
        wk = _walk(c, plan, specs, theta, widths, trainable, threads)
        evs = {r: _event_weights(c, _region_plan(plan, r), theta, widths, trainable)
               for r in wk["pe"]}
        if shift is None:
            w_e = _times(evs[0], wk["pe"][0], nl)
            value["selected_sumw"] = np.array(np.sum(w_e[:, 0]), dtype=np.float64)
            value["selected_sumw2"] = np.array(np.sum(w_e[:, 0] ** 2), dtype=np.float64)
            jac["selected_sumw"] = w_e[:, 1:].sum(axis=0)
            jac["selected_sumw2"] = (2.0 * w_e[:, :1] * w_e[:, 1:]).sum(axis=0)
        for spec in specs:
            node = spec.node
            factor = np.ones(n_ev)
            if spec.weight is not None:
                tree = plan.weights[spec.weight].tree
                fv = np.broadcast_to(np.asarray(factor_values(
                    tree, {f"event:{k}": v for k, v in c.events.items()}), np.float64), (n_ev,))
                # events of weight 0 may divide 0 by 0: their factor is 0 (as the JAX kernel)
                factor = np.where(weight != 0, fv, 0.0)
            ev = evs[spec.region][:, :nl] * factor[:, None]
            if node.kind == "branch":
                x = np.asarray(c.events[node.head], dtype=np.float64)
                w, at = _times(ev, wk["pe"][spec.region], nl), np.arange(n_ev)
            else:
                s = node.head if node.kind == "field" else node.slots[0][0]
                coll = plan.sets.collection_of(s)
                ci = wk["collections"].index(coll)
                lo, hi = int(wk["base"][ci]), int(wk["base"][ci + 1])
                p = (wk["ow"][(spec.region, s)] if node.kind == "field"
                     else wk["lw"][(spec.region, s, node.slots[0][1])])[lo:hi]
                at = np.repeat(np.arange(n_ev), np.diff(wk["coff"][ci]))
                x = np.asarray(wk["flats"][coll][node.field], dtype=np.float64)
                w = _times(ev[at], p, nl)
            x = np.abs(x) if node.absolute else x
            v, j = _fill(x, w, (weight * factor)[at], spec.edges)
            value[spec.group][spec.key] = v
            jac[spec.group][spec.key] = j
    if plan.observables:
        ov, oj = fastkernel.evaluate_columns(cols, dataclasses.replace(plan, hists=()), theta,
                                             widths, order=order, threads=threads)
        value["observables"], jac["observables"] = ov["observables"], (oj or {}).get(
            "observables", {})
    return value, (jac if order >= 1 else None)
