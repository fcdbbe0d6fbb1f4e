"""Soft histogram templates and their variations on the numba kernel.

:func:`evaluate_columns` returns what :func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns`
returns plus the ``histograms`` and ``templates`` groups of
:func:`analysis.pipeline.backends.jax.histkernel.histogram_states` (the JAX reference: the same
meaning, the same :class:`~analysis.stats.histogram.Histogram` states and Jacobians),
for every plan the numba backend's rules serve
(:mod:`analysis.pipeline.backends.numba.rules`): histograms of per-object fields (``S.f``,
``abs(S.f)``), leading objects (``S[i].f``: one indexed set), candidate tuples of one
indexed set (``mass(S[0] + S[1])``: :mod:`analysis.pipeline.backends.numba._histmulti`),
per-event branches and
event sums (``sum(S.f)``, ``count(S)``: :mod:`analysis.pipeline.backends.numba.kernels._numba_esum`),
weight variations of per-event factors, shifts, and channel regions.

Per histogram ``sumw[b] = sum_entries w p [x in b]`` and ``sumw2[b] = sum w^2 p [x in b]``
(:mod:`analysis.stats.histogram`), ``w`` the event weight (x a weight variation's
factor) x the soft event cuts of the spec's region, ``p`` the entry's probability from
the walk of :mod:`analysis.pipeline.backends.numba.kernels._numba_hist` (its module
docstring: one walk per shift side serves every region at once, two or four sides of a
shift share one walk's lanes or pages). A weight variation reuses its walk's
probabilities; only its fill is new (:mod:`analysis.pipeline.backends.numba._histfills`:
hard and soft bins, trainable edges). The plan's observables read the nominal walk too
(region 0: :func:`analysis.pipeline.backends.numba.fastkernel.observable_states`), so each
shift side's selection is walked once per chunk. A shift's columns:
:func:`analysis.pipeline.scorecols.shifted`; the regions' joint tables and the walk
orders: :mod:`analysis.pipeline.backends.numba._histtables`.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from analysis.pipeline import hardcut, scorecols
from analysis.pipeline.backends.numba import _fastleading, _histfills, _histmulti, fastkernel
from analysis.pipeline.backends.numba._fastpatterns import balanced_blocks, patterns_into
from analysis.pipeline.backends.numba._fastpool import _run_dynamic
from analysis.pipeline.backends.numba._fasttables import chunk_fields, offsets, walk_args
from analysis.pipeline.backends.numba._histfills import _fill_side, _run_fills, fill_key
from analysis.pipeline.backends.numba._histtables import (
    _joint_static,
    _joint_tables,
    _memo,
    _order,
    _walk_static,
)
from analysis.pipeline.backends.numba.fastkernel import _inputs, _work
from analysis.pipeline.backends.numba.kernels import (
    _numba_dp,
    _numba_esum_fill,
    _numba_hist,
)
from analysis.pipeline.histplan import GROUPS
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import state_tree

__all__ = ["evaluate_columns"]

_SUMS = ("sum", "count")
# Events per block of the walk, about: its outputs are per event and object (no sums),
# so neither the block size nor which thread walks a block changes a bit; the threads
# take the blocks a few at a time (_fastpool._run_dynamic: blocks of uneven cost even out).
WALK_BLOCK = 1024


# --- one walk ------------------------------------------------------------------------


def _walk(variants: list[ChunkColumns], plan: Plan, specs, theta, widths, trainable, threads,
          *, nominal: bool, moved: tuple[str, ...] | None = None, kept: dict | None = None,
          ids: Iterator[int] | None = None, sides: list | None = None,
          ranked: dict | None = None, observables: bool = False,
          trace: Counter | None = None) -> list[dict]:
    """One walk for the histogram ``specs`` on each of ``variants`` (one, two or four
    shift sides: the columns of each; ``nominal``: with the selection, region 0, whatever
    the specs); two share the walk's lanes (:mod:`analysis.pipeline.backends.numba.kernels._numba_hist`) when the
    tangents fit in half of them and their walk orders are equal, four walk as two such
    pairs in the walk's pages, else they walk apart (a pair each side alone, four as two
    pairs, three as a pair and one). Per variant: per region ``pe[r]`` ``(E, W)``, per ``(region, set)``
    object weights and per ``(region, set, depth)`` leading weights ``(N, W)`` by
    global object index (``W``: 4 lanes for up to 3 tangents, else 8), the objects'
    offsets and flat fields. ``moved``, ``kept``: the columns a shift moves (its own, the
    scores of its inputs) and the chunk's cut probabilities of :func:`analysis.pipeline.backends.numba._fastpatterns.patterns_into` (the nominal
    walk's, made first); ``ids``: numbers the walks of one chunk (each its own output
    buffers: they live until the fills); ``sides``: per
    variant None (the nominal columns) or its shift ``(column, factor)``; ``ranked``:
    the walk orders of this pass over the chunk (:func:`_order`), and under ``("index",
    collections, whose)`` the walk order they make. ``observables`` (the nominal walk of a
    plan with observables, one variant): the walk also gives what they read in region 0
    (:func:`analysis.pipeline.backends.numba.fastkernel.observable_states`): the object
    weights of their sets, ``"sa"`` the event sums' ``E[X^r 1_pass]`` by observable index
    and ``"cands"`` the indexed observables' candidates (from this walk's pattern
    probabilities and region 0's pass table); ``"multi"`` those of the histograms of
    candidate tuples (:func:`analysis.pipeline.backends.numba._histmulti.candidates`).
    ``trace``: counts each ``(side, region)`` walked."""
    kept = {} if kept is None else kept
    ranked = {} if ranked is None else ranked
    sides = [None] * len(variants) if sides is None else sides
    ids = itertools.count() if ids is None else ids
    nl = len(trainable) + 1
    lanes = _numba_dp.LANES
    half = lanes // 2
    sums = any(s.node.kind in _SUMS for s in specs)
    alone = sums or any(s.node.kind in _histmulti.KINDS for s in specs)

    def apart(cut: int) -> list[dict]:
        """The walks of ``variants[:cut]`` and of the rest (each split further if need be)."""
        return [w for part in (slice(0, cut), slice(cut, None))
                for w in _walk(variants[part], plan, specs, theta, widths, trainable, threads,
                               nominal=nominal, moved=moved, kept=kept, ids=ids,
                               sides=sides[part], ranked=ranked, trace=trace)]

    # event sums and candidate tuples read one variant's lanes (h = 0): shift sides walk
    # alone each then; two pairs walk together (pages), a third side apart
    n_var = len(variants)
    if n_var == 2 and (nl > half or alone):
        return apart(1)
    if n_var > 2 and (n_var != 4 or nl > half or alone):
        return apart(4 if n_var > 4 else 2)
    regions = sorted({s.region for s in specs} | ({0} if nominal else set()))
    rpos = {r: q for q, r in enumerate(regions)}
    regs, tb, wb = tuple(regions), theta.tobytes(), widths.tobytes()
    model, caps, fs, dfs = _memo(plan, ("joint", regs, tb, wb, tuple(trainable)),
                                 lambda: _joint_tables(plan, regs, theta, widths, tuple(trainable)))
    tab = _memo(plan, ("static", regs), lambda: _joint_static(plan, regs))
    n_ev = int(variants[0].n_events)
    # the counts are the same arrays in every variant, the fields each variant's own
    coff, base, flat, max_seq = offsets(variants[0], tab.collections, plan.sets)
    flats = [flat] + [chunk_fields(vc, tab.collections, plan.sets) for vc in variants[1:]]
    n_tot = int(base[-1])
    setspec = {s.name: s for s in plan.sets.sets}
    # the walk's outputs, each once: object weights (region, set), leading targets (set,
    # depth), leading weights (region, set, depth); the observables' event sums (index)
    obs = plan.observables if observables else ()
    if observables:
        assert len(variants) == 1 and nominal
    ow_keys = list(dict.fromkeys([(0, o.x.head) for o in obs if o.x.kind == "field"]
                                 + [(s.region, s.node.head) for s in specs
                                    if s.node.kind == "field"]))
    indexed = [s for s in specs if s.node.kind == "index"]
    ld_keys = list(dict.fromkeys(tuple(s.node.slots[0]) for s in indexed))
    lw_keys = list(dict.fromkeys((s.region, *s.node.slots[0]) for s in indexed))
    obs_sums = [i for i, o in enumerate(obs) if o.x.kind in _SUMS]
    ranks = []
    rblock, rblocks = balanced_blocks(n_ev, fastkernel.BLOCK, threads)
    colls = tuple(sorted({setspec[s].collection for s, _ in ld_keys}))
    for fl, side in zip(flats, sides, strict=True):
        orders, whose = {}, []
        for c in colls:
            ci = tab.collections.index(c)
            rank = next(setspec[s].rank_by for s, _ in ld_keys if setspec[s].collection == c)
            orders[ci], w = _order(ranked, c, rank, side, coff[ci], fl[c], (rblock, rblocks),
                                   threads)
            whose.append((c, rank, w))
        ikey = ("index", tab.collections, tuple(whose))
        if ikey not in ranked or any(w is not None for *_, w in whose):
            rankidx = np.arange(n_tot, dtype=np.int64)
            for ci, out in orders.items():
                rankidx[base[ci]: base[ci + 1]] = base[ci] + out
            ranked[ikey] = rankidx
        ranks.append(ranked[ikey])
    if any(r is not ranks[0] and not np.array_equal(r, ranks[0]) for r in ranks[1:]):
        return apart(n_var // 2)  # a pair each side alone, two pairs a pair each
    # the pattern probabilities of each variant, its tangents in its half of the lanes
    # (every entry the walk reads is written: per-thread scratch, reused across chunks);
    # two pairs: each pair's 8 lanes in its page (the walk's paged layout)
    pages = n_var // 4 + 1
    pv_all = _work(f"hist_pv{pages}", (n_tot, tab.pat.shape[1], 2 * pages))
    pd_all = _work(f"hist_pd{pages}", (n_tot, tab.pat.shape[1], pages * lanes))
    for q in range(pages):
        patterns_into(tab, coff, base, flats[2 * q: 2 * q + 2], theta, widths, trainable,
                      threads, moved, kept, pv_all, pd_all, q)
    if pages == 2:
        pd_all = pd_all.reshape(n_tot, tab.pat.shape[1], pages, lanes)
    h = half if n_var > 1 else 0
    if h:
        dfs = dfs.copy()
        dfs[:, :, h: h + nl] = dfs[:, :, :nl]
    tgt, *leading = _memo(plan, ("walk", regs, caps.tobytes(), tuple(ld_keys)),
                          lambda: _walk_static(plan, regs, caps.tobytes(), tuple(ld_keys)))
    # the observables' event sums of region 0 (its pass table is the walk's first)
    sum_x, sum_has, binom = fastkernel.event_sum_inputs(plan, tab, base, flats[0], obs_sums)
    sa = np.zeros((len(obs_sums), n_ev, binom.shape[0], lanes))
    # the lanes that carry something (value and tangents), in per-thread scratch reused
    # across chunks (the walk writes every entry the fills read), one set per walk
    width = half if nl <= half else lanes
    k = next(ids)
    pe = _work(f"hist_pe{k}", (n_var, len(regions), n_ev, width))
    ow = _work(f"hist_ow{k}", (n_var, len(ow_keys), n_tot, width))
    lw = _work(f"hist_lw{k}", (n_var, len(lw_keys), n_tot, width))
    es, n_unc = _event_sums(specs, plan, tab, tgt, coff, base, flats[0], pv_all, pd_all, fs,
                            dfs, rpos, theta, widths, trainable, width, k,
                            threads) if sums else ({}, {})
    # event sums alone: each region's P(pass) is the sum of its bins' P(pass, X in b),
    # the walk would compute it once more (over every object; within an ulp of it); hard
    # bins only (soft bins' probabilities sum to 1 within rounding, their edges' tangents
    # to 0 within rounding: not the walk's exact zeros)
    by_region = {key[0]: key for key in es if _histfills.soft_width(key[3], widths) == 0.0}
    if (n_ev and not ow_keys and not lw_keys and not obs_sums and n_var == 1
            and set(regions) <= set(by_region)):
        for r in regions:  # bin by bin, in order (a compiled loop: numpy's sums were slower)
            _numba_esum_fill.bin_totals(es[by_region[r]], pe[0, rpos[r]])
    elif n_ev:
        if trace is not None:
            trace.update(itertools.product(sides, regions))  # (side, region): one each
        block, n_blocks = balanced_blocks(n_ev, WALK_BLOCK, threads)
        args = walk_args(tab, plan.sets, coff, base, max_seq, pv_all, pd_all, h, tgt, fs, dfs,
                         [(rpos[r], s) for r, s in ow_keys], (sum_x, sum_has, binom), block,
                         pe, ow, sa, rankidx=ranks[0], leading=(ld_keys, *leading),
                         lw_keys=[(rpos[r], s, d) for r, s, d in lw_keys], lw=lw)
        _run_dynamic(_numba_dp.compiled(_numba_hist.walk, args), args, n_blocks, threads)
    cands = {}
    if observables and any(_fastleading.key(o.x) for o in plan.observables):
        block, n_blocks = fastkernel.BLOCK, max(1, -(-n_ev // fastkernel.BLOCK))
        cands = _fastleading.walk(plan, tab, coff, base, flats[0],
                                  np.ascontiguousarray(pv_all[:, :, 0]), pd_all, tgt, fs[0],
                                  dfs[0], block, n_blocks, threads)
    multi = _histmulti.candidates(plan, specs, cands, tab, coff, base, flats[0], pv_all, pd_all,
                                  tgt, fs, dfs, rpos, threads)
    return [{
        "pe": {r: pe[v, rpos[r]] for r in regions},
        "ow": {k: ow[v, i] for i, k in enumerate(ow_keys)},
        "lw": {k: lw[v, i] for i, k in enumerate(lw_keys)},
        "coff": coff, "base": base, "flats": flats[v], "collections": tab.collections,
        "es": es, "n_unc": n_unc,
        "sa": {i: sa[o] for o, i in enumerate(obs_sums)}, "cands": cands, "multi": multi,
    } for v in range(n_var)]


def _event_sums(specs, plan: Plan, tab, tgt, coff, base, flats, pv_all, pd_all, fs, dfs, rpos,
                theta, widths, trainable, width: int, k: int, threads) -> tuple[dict, dict]:
    """Per :func:`analysis.pipeline.backends.numba._histfills.fill_key` of the event-sum
    specs, ``(E, bins, width)`` each event's bins' probabilities and tangents
    (:func:`analysis.pipeline.backends.numba._histfills.event_sum_bins`) from the walk's
    pattern probabilities, before the next walk reuses them; per collection ``(E,)`` the
    uncertain objects of each event (the most over the specs)."""
    n_ev = int(coff.shape[1] - 1)
    es: dict = {}
    n_unc: dict = {}
    objects: dict = {}  # which objects the kernel enumerates: one per set, not per region
    for spec in specs:
        key = fill_key(spec)
        if spec.node.kind not in _SUMS or key in es:
            continue
        coll = plan.sets.collection_of(spec.node.head)
        q = rpos[spec.region]
        out = _work(f"hist_es{k}_{len(es)}", (n_ev, len(spec.edges) + 1, width))
        walk = (coff, base, pv_all, pd_all, tab.n_pat, tgt, np.ascontiguousarray(fs[q]),
                np.ascontiguousarray(dfs[q]))
        _, unc = _histfills.event_sum_bins(spec, plan.sets, tab, walk, flats, theta, widths,
                                           trainable, out, objects, block=WALK_BLOCK,
                                           threads=threads)
        es[key] = out
        n_unc[coll] = unc if coll not in n_unc else np.maximum(n_unc[coll], unc)
    return es, n_unc


def _observables(cols: ChunkColumns, plan: Plan, wk: dict, ev: np.ndarray, nl: int,
                 threads: int | None) -> tuple[dict, dict]:
    """The observables' ``(value, jac)`` from the nominal walk ``wk`` (:func:`_walk` with
    ``observables``; its outputs widened to all lanes) and region 0's event weights
    ``ev``."""
    lanes = _numba_dp.LANES

    def wide(a: np.ndarray) -> np.ndarray:
        out = np.zeros((a.shape[0], lanes))
        out[:, : a.shape[1]] = a
        return out

    base = wk["base"]
    off_of = {c: wk["coff"][ci] for ci, c in enumerate(wk["collections"])}
    # region 0's object weights of each set, its collection's rows of the global index
    at = {c: slice(int(base[ci]), int(base[ci + 1])) for ci, c in enumerate(wk["collections"])}
    wo_of = {s: wide(w[at[plan.sets.collection_of(s)]]) for (r, s), w in wk["ow"].items() if r == 0}
    return fastkernel.observable_states(
        cols, plan, off_of=off_of, flats=wk["flats"], pe=wide(wk["pe"][0]), wo_of=wo_of,
        sa_of=wk["sa"], ev=ev, cands=wk["cands"], np1=nl, threads=threads)


def evaluate_columns(
    cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, *, order: int = 1,
    threads: int | None = None, uncertain: dict | None = None, trace: Counter | None = None,
) -> tuple[dict, dict | None]:
    """``(value, jac)`` of one chunk with its histogram states, as
    :func:`analysis.pipeline.backends.jax.passes.evaluate_chunk` returns them (numpy float64; ``jac``
    None for ``order=0``); ``plan``: one the numba rules serve. The objects that a cut
    of width 0 removes from every root set of their collection leave before anything
    else (:func:`analysis.pipeline.hardcut.compact`). Each shift side's
    selection is walked once: the nominal walk (region 0 and the channels) gives the
    yields, the nominal templates and the observables
    (:func:`analysis.pipeline.backends.numba.fastkernel.observable_states`).
    ``uncertain`` (a dict, filled in): per collection an event-sum histogram sums over,
    ``(E,)`` the uncertain objects of each event (the most over regions and shifts).
    ``trace`` (a :class:`collections.Counter`, added to): per ``(side, region)`` the
    walks that covered it (side None: the nominal columns, else the shift's ``(column,
    factor)``)."""
    theta, widths, trainable = _inputs(plan, order, theta, widths)
    # the objects a width-0 cut removes from every root set (in every shift side) leave
    # first: probability exactly 0 with zero tangents, they move no count, sum or fill
    cols = hardcut.compact(cols, plan, theta, widths)
    # per shift side, the specs filled from one set of entries: (region, x), its variations
    groups: dict[int | None, dict[tuple, list]] = {None: {}}
    for spec in plan.hists:
        groups.setdefault(spec.shift, {}).setdefault(fill_key(spec), []).append(spec)
    value: dict[str, Any] = {group: {} for group in GROUPS}  # the histogram states
    jac: dict[str, Any] = {group: {} for group in GROUPS}
    yields: dict[str, tuple] = {}
    # shift sides of one column with the same templates walk together, up to four (two
    # pairs: their lanes side by side, the pairs in pages)
    jobs: list[list] = []
    for shift, fills in groups.items():
        c = cols if shift is None else scorecols.shifted(cols, plan.shifts[shift].key,
                                                         plan.shifts[shift].factor)
        last = jobs[-1] if jobs else None
        if (shift is not None and last is not None and len(last) < 4 and last[0][0] is not None
                and list(last[0][2]) == list(fills)
                and plan.shifts[last[0][0]].key == plan.shifts[shift].key):
            last.append((shift, c, fills))
        else:
            jobs.append([(shift, c, fills)])
    kept: dict = {}  # the cut probabilities: the nominal's, a shift's unmoved rows
    ids = itertools.count()  # the walks' output buffers
    ranked: dict = {}  # this pass's walk orders
    evs: dict = {}  # the regions' event weights
    tasks: list = []  # the fills
    for job in jobs:
        specs = [s for group in job[0][2].values() for s in group]
        # the shifted column and the scores it moves (their cuts evaluated again)
        moved = None if job[0][0] is None else scorecols.moved_columns(
            cols, plan.shifts[job[0][0]].key)
        walks = _walk([c for _, c, _ in job], plan, specs, theta, widths, trainable, threads,
                      nominal=moved is None, moved=moved,
                      kept=kept, ids=ids, ranked=ranked, trace=trace,
                      observables=moved is None and bool(plan.observables),
                      sides=[None if sh is None else (plan.shifts[sh].key,
                                                      plan.shifts[sh].factor)
                             for sh, _, _ in job])
        if moved is None:
            nominal = walks[0]
        for wk in walks:
            for coll, n in wk["n_unc"].items():
                if uncertain is not None:
                    uncertain[coll] = n.copy() if coll not in uncertain else np.maximum(
                        uncertain[coll], n)
        for (shift, c, fills), wk in zip(job, walks, strict=True):
            _fill_side(plan, shift, c, fills, wk, theta, widths, trainable, evs, value, jac,
                       tasks, threads, yields)
    _run_fills(tasks, threads)
    ov: dict = {}
    oj: dict = {}
    if plan.observables:  # from the nominal walk (region 0)
        ov, oj = _observables(cols, plan, nominal, evs[None, 0], len(trainable) + 1, threads)
    return (state_tree(*yields["value"], ov, **value),
            state_tree(*yields["jac"], oj, **jac) if order >= 1 else None)
