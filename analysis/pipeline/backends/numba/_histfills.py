"""The histogram fills of :mod:`analysis.pipeline.backends.numba.fasthist`: from a walk's entry
probabilities to the histogram states.

:func:`_fill_side` turns one shift side's walk into fill tasks (one per group of specs
filled from one set of entries: a histogram, its channel templates and their weight
variations), :func:`_run_fills` runs the
tasks on threads (each fill its own sequential sum: no bit depends on the threads) and
makes the states. Hard and soft bins (a histogram's
``width > 0``) fill with :func:`analysis.pipeline.backends.numba.kernels._numba_fill.fill`,
at the edges of the pass's parameters (trainable edges: their tangents in the lanes of
their parameters), the meaning of :mod:`analysis.stats.softbins`.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba import _histmulti, fastkernel
from analysis.pipeline.backends.numba._fastpatterns import balanced_blocks
from analysis.pipeline.backends.numba._fastpool import _run_dynamic, splits, yield_sums
from analysis.pipeline.backends.numba._fasttables import _par_index
from analysis.pipeline.backends.numba._histtables import _memo, _region_plan
from analysis.pipeline.backends.numba.fastkernel import _event_weights, _run_blocks
from analysis.pipeline.backends.numba.kernels import (
    _numba_dp,
    _numba_esum,
    _numba_esum_fill,
    _numba_fill,
)
from analysis.pipeline.histplan import factor_values, too_many_uncertain
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.select.certain import certain_objects
from analysis.stats.histogram import Histogram

__all__ = ["edge_lanes", "event_sum_bins", "fill_key", "set_objects", "soft_width",
           "summed_values"]

_SUMS = ("sum", "count")


def _factors(plan: Plan, specs, cols: ChunkColumns, weight: np.ndarray, rows: dict) -> np.ndarray:
    """``(V, E)`` per-event factors of the specs' weight variations (1: none), from the
    event columns of ``cols``; ``rows`` (one pass's, per set of event columns) keeps each
    variation's row and each set of rows already made (the templates of several channels
    share them). Not kept across passes: a chunk's rows would weigh as much as a third
    of its columns in the AGC configuration, for ~1 ms a pass."""
    trees = tuple(None if s.weight is None else plan.weights[s.weight].tree for s in specs)
    if trees not in rows:
        out = np.empty((len(specs), int(cols.n_events)))
        for i, tree in enumerate(trees):
            if tree is None:
                out[i] = 1.0
                continue
            if ("row", tree) not in rows:
                events = {f"event:{k}": v for k, v in cols.events.items()}
                fv = factor_values(tree, events)
                # events of weight 0 may divide 0 by 0: their factor is 0 (as the JAX kernel)
                rows["row", tree] = np.where(weight != 0, np.asarray(fv, np.float64), 0.0)
            out[i] = rows["row", tree]
        rows[trees] = out
    return rows[trees]


def _fill_side(plan: Plan, shift, c: ChunkColumns, fills: dict, wk: dict, theta, widths,
               trainable, evs: dict, value: dict, jac: dict, tasks: list,
               threads: int | None = None, yields: dict | None = None) -> None:
    """The histogram fills of one shift side (``fills``: ``{fill_key: specs}``) from
    its walk ``wk`` on its columns ``c`` appended to ``tasks`` as ``(cost, kernel,
    args, finish)`` (:func:`_run_fills` runs them; ``finish`` puts the states into ``value``
    and ``jac``, each ``{group: {key: Histogram}}``); the selected yield and its sum of
    squares of the nominal side at once, into ``yields`` (``"value"``, ``"jac"``: pairs). ``evs``: the regions'
    event weights by ``(shift side, region)``, the side None for the nominal and for
    every shift of an object field (it leaves them as they are), and under
    ``("factors", side)`` the weight variations' factors (:func:`_factors`);
    ``threads``: the pass's (the yield sums run on them)."""
    nl = len(trainable) + 1
    n_ev = int(c.n_events)
    weight = np.ascontiguousarray(c.weight, dtype=np.float64)
    ekey = shift if shift is not None and plan.shifts[shift].key.startswith("event:") else None
    for r in wk["pe"]:
        if (ekey, r) not in evs:
            sub = _memo(plan, ("region", r), lambda r=r: _region_plan(plan, r))
            evs[ekey, r] = _event_weights(c, sub, theta, widths, trainable)
    if shift is None:  # the selected yield as the numba kernel sums it (fastkernel)
        ys = yield_sums(evs[None, 0], np.ascontiguousarray(wk["pe"][0]), nl, fastkernel.BLOCK,
                        threads)
        if yields is not None:
            yields["value"] = (np.array(ys[0, 0], dtype=np.float64),
                               np.array(ys[1, 0], dtype=np.float64))
            yields["jac"] = (ys[0, 1:], ys[1, 1:])
    width = 4 if nl <= 4 else _numba_dp.LANES  # the lanes that carry something
    for (region, node, *_), group in fills.items():
        edges = group[0].edges
        sumw = np.zeros((len(group), len(edges) + 1, width))
        sumw2 = np.zeros_like(sumw)

        def finish(group=group, edges=edges, sumw=sumw, sumw2=sumw2) -> None:
            for i, spec in enumerate(group):
                value[spec.group][spec.key] = Histogram(edges, sumw[i, :, 0], sumw2[i, :, 0])
                jac[spec.group][spec.key] = Histogram(edges, sumw[i, :, 1:nl],
                                                      sumw2[i, :, 1:nl])

        factors = _factors(plan, group, c, weight, evs.setdefault(("factors", ekey), {}))
        if node.kind in _SUMS:  # per event, its bins' probabilities (soft or hard)
            pb = wk["es"][fill_key(group[0])]
            args = (np.ascontiguousarray(pb[:, :, :width]), evs[ekey, region], factors, weight,
                    sumw, sumw2)
            # a range of bins per thread: each bin's sums stay one sequential sum over
            # the events (the same bits), the threads write disjoint bins
            n_b = pb.shape[1]
            cuts = splits(n_b, max(1, min(fastkernel._threads(threads), n_b)))
            for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
                tasks.append((pb.shape[0] * (hi - lo) * (1 + len(group)), _numba_esum_fill.fill_bins,
                              (*args, lo, hi), finish if lo == 0 else _nothing))
            continue
        if node.kind in _histmulti.KINDS:  # candidate tuples (their own walk's weights)
            x, p, off = _histmulti.entries(plan, node, region, wk, c)
        elif node.kind == "branch":
            x = c.events[node.head]
            p, off = wk["pe"][region], np.arange(n_ev + 1, dtype=np.int64)
        else:
            s = node.head if node.kind == "field" else node.slots[0][0]
            coll = plan.sets.collection_of(s)
            ci = wk["collections"].index(coll)
            lo, hi = int(wk["base"][ci]), int(wk["base"][ci + 1])
            p = (wk["ow"][(region, s)] if node.kind == "field"
                 else wk["lw"][(region, s, node.slots[0][1])])[lo:hi]
            off = wk["coff"][ci]
            x = wk["flats"][coll][node.field]
        x = np.ascontiguousarray(np.abs(x) if node.absolute else x, dtype=np.float64)
        head = (off, x, np.ascontiguousarray(p), evs[ekey, region], factors, weight,
                np.asarray(group[0].edges_of(theta), np.float64))
        # soft bins (width > 0): their edges' tangents in their parameters' lanes
        soft = soft_width(group[0].width_index, widths)
        elane = edge_lanes(group[0], trainable, len(edges))
        tasks.append((x.shape[0] * (len(edges) if soft > 0.0 else 1) * (2 + len(group)),
                      _numba_fill.fill, (*head, soft, elane, sumw, sumw2), finish))


def soft_width(width_index: int | None, widths) -> float:
    """The soft bins' width of a histogram at ``widths`` (0.0: hard bins)."""
    return 0.0 if width_index is None else float(widths[width_index])


def edge_lanes(spec, trainable, n_edges: int) -> np.ndarray:
    """Per edge of ``spec`` the lane of its parameter among ``trainable`` (0: a fixed
    edge, or a trainable one outside this block of tangents)."""
    elane = np.zeros(n_edges, np.int64)
    for j, par in enumerate(spec.edge_params or (), start=1):
        elane[j] = 1 + _par_index(trainable, par)
    return elane


def set_objects(tab, base: np.ndarray, ci: int, name: str, pv: np.ndarray) -> tuple:
    """``(has, cert, ins)`` of set ``name`` of collection ``ci`` (the event-sum kernels'
    and their adjoint's): ``has[p]`` 1 where pattern ``p`` holds the set, and which objects
    are certain (:func:`analysis.select.certain.certain_objects`, the one definition of
    both backends) from the pattern probabilities ``pv`` ``(N, P)`` (values)."""
    has = np.ascontiguousarray(tab.pat[ci, :, tab.local[name]] == 1, dtype=np.int64)
    n_pat = int(tab.n_pat[ci])
    return (has, *certain_objects(pv[base[ci]: base[ci + 1], :n_pat], has[:n_pat] == 1))


def event_sum_bins(spec, sets, tab, walk: tuple, flats: dict, theta, widths, trainable,
                   out: np.ndarray, objects: dict, *, block: int,
                   threads: int | None) -> tuple[tuple, np.ndarray]:
    """Each event's ``P(region passes, X in bin b)`` of the event sum ``spec`` and its
    tangents in ``trainable`` into ``out`` ``(E, bins, >= 4)``
    (:func:`analysis.pipeline.backends.numba.kernels._numba_esum.event_sum_bins`, its
    arguments ``walk = (coff, base, pv_all, pd_all, n_pat, tgt, f, df)`` first), in
    blocks of about ``block`` events; which objects it enumerates once per set, kept in
    ``objects``. Returns its arguments after ``walk`` (its adjoint's too) and ``(E,)``
    each event's uncertain objects (too many: :func:`~analysis.pipeline.histplan.too_many_uncertain`)."""
    node = spec.node
    coff, base, pv_all = walk[:3]
    coll = sets.collection_of(node.head)
    if node.head not in objects:
        ci = tab.collections.index(coll)
        objects[node.head] = (ci, *set_objects(tab, base, ci, node.head, pv_all[:, :, 0]))
    ci = objects[node.head][0]
    vals = summed_values(node, flats, coll, int(coff[ci, -1]))
    edges = np.array(spec.edges_of(theta), np.float64)  # writable: one compiled type
    rest = (*objects[node.head], vals, edges)
    n_ev = out.shape[0]
    unc = np.zeros(n_ev, np.int64)
    if n_ev:
        block, n_blocks = balanced_blocks(n_ev, block, threads)
        args = (*walk, *rest, soft_width(spec.width_index, widths),
                edge_lanes(spec, trainable, len(edges)), len(trainable) + 1, block, out, unc)
        kernel = _numba_esum.event_sum_bins
        _run_dynamic(_numba_dp.compiled(kernel, args), args, n_blocks, threads)
    top = int(unc.max(initial=0))
    if top > _numba_esum.MAX_UNCERTAIN:  # more than the kernel enumerates
        raise too_many_uncertain(spec, coll, int(np.argmax(unc)), top)
    return rest, unc


def summed_values(node, flats: dict, coll: str, n_obj: int) -> np.ndarray:
    """The ``n_obj`` values per object that an event sum ``node`` adds (float64,
    contiguous): ones for ``count(S)``, ``S``'s field (its ``abs``) for ``sum(S.f)``."""
    if node.kind == "count":
        return np.ones(n_obj)
    vals = np.asarray(flats[coll][node.field], np.float64)[:n_obj]
    return np.ascontiguousarray(np.abs(vals) if node.absolute else vals)


def fill_key(spec) -> tuple:
    """The specs filled from one set of entries by one fill: one region and ``x``, with
    the same bins (soft bins' width, trainable edges)."""
    return (spec.region, spec.node, spec.edges, spec.width_index, spec.edge_params)


def _nothing() -> None:
    """The ``finish`` of a fill task whose states another task of its histogram makes."""


def _fill_bins(bins: list, b0: int, b1: int) -> None:
    for b in range(b0, b1):
        for kernel, args in bins[b]:
            kernel(*args)


def _run_fills(tasks: list, threads: int | None) -> None:
    """Every fill of ``tasks`` (:func:`_fill_side`), the costliest first, each to the
    thread with the least work so far (each fill is its own sequential sum, whichever
    thread runs it: no bit depends on the threads), then their states. Each kernel is
    compiled first with the SLP vectorizer
    (:func:`analysis.select.lanes.policy.vectorised`: the same floats)."""
    n = max(1, min(fastkernel._threads(threads), len(tasks)))
    bins: list[list] = [[] for _ in range(n)]
    load = [0] * n
    for cost, kernel, args, _ in sorted(tasks, key=lambda t: -t[0]):
        i = load.index(min(load))
        # compiled here (SLP vectorizer on), not by the first thread to call it
        bins[i].append((_numba_dp.vectorised(kernel, args), args))
        load[i] += cost
    _run_blocks(_fill_bins, (bins,), n, threads)
    for *_, finish in tasks:
        finish()
