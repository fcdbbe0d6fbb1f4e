"""The numba kernel's static tables of a plan (numpy; cached per plan and count model).

:class:`_Tables`: the count model's sets, patterns and pattern codes as integer arrays
for the walks (:mod:`analysis.select.lanes.steps`); :func:`_targets`: the count state
after adding one object of each pattern; :func:`_pass_fn`: the pass table and its
derivative from their one definition (:func:`analysis.select.objects._pass_table`, in
JAX), :func:`_pass_table` at a plan's thresholds with its tangents; :func:`_reduced`:
the count caps lowered to the last state where the table changes (:func:`walk_table`: the
three for a walk); :func:`one_sided`:
cuts as the threshold cuts the loops know; :func:`offsets`: a chunk's objects per
collection as the loops index them (kept with its columns), :func:`chunk_fields` its fields;
:func:`walk_args`: the arguments of the walk
(:func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk`) from them.
Used by the numba kernel's host modules only.
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache

import jax
import numpy as np

from analysis.pipeline.plan import Plan, threshold_value
from analysis.select import cuts as cut_kinds
from analysis.select.objects import CountModel
from analysis.select.objects import _pass_table as _jax_pass_table
from analysis.stats._programs import program_call

__all__: list[str] = []  # internal to the numba kernel


def one_sided(cuts) -> tuple | None:
    """``cuts`` (object or event cuts of a plan) as one-sided threshold cuts, the only
    kind the loops know: a cut whose kind declares ``sides`` (:mod:`analysis.select.cuts`:
    its probability is the product of one-sided cuts, one per bound) becomes those cuts
    (a window ``lo < x < hi``: ``x > lo`` and ``x < hi``, the same width); ``None`` if a
    cut's kind has none, or derives its thresholds from its bounds (``edges``: the plan
    must be lowered first, :func:`analysis.pipeline.backends.numba.cutedges.lower`)."""
    out = []
    for cut in cuts:
        op = getattr(cut, "op", "") or ""
        if not op and not getattr(cut, "more", ()):
            out.append(cut)  # a threshold built without an op
            continue
        try:
            sides = getattr(cut_kinds.kind_of(op), "sides", None)
        except KeyError:
            return None
        if sides is None or getattr(cut_kinds.kind_of(op), "edges", None) is not None:
            return None
        for (greater, inclusive), (param, value) in zip(sides(op), cut.bounds, strict=True):
            out.append(dataclasses.replace(cut, greater=greater, inclusive=inclusive,
                                           param=param, value=value, op="", more=()))
    return tuple(out)


class _Tables:
    """Per plan: the model's tables as numba arrays, reduced to the states that matter."""

    def __init__(self, plan: Plan) -> None:
        sp = plan.sets
        model: CountModel = sp.model
        self.model = model
        self.collections = model.collections
        n_coll = len(self.collections)
        sets_of = model._sets_of
        s_max = max([len(sets_of[c]) for c in self.collections] + [1])
        self.set_names = [s.name for c in self.collections for s in sets_of[c]]
        gidx = {name: i for i, name in enumerate(self.set_names)}
        self.coll_sets = np.full((n_coll, s_max), -1, np.int64)
        self.n_coll_sets = np.zeros(n_coll, np.int64)
        self.local = {}
        for ci, c in enumerate(self.collections):
            for li, s in enumerate(sets_of[c]):
                self.coll_sets[ci, li] = gidx[s.name]
                self.local[s.name] = li
            self.n_coll_sets[ci] = len(sets_of[c])
        p_max = max([len(model.patterns[c]) for c in self.collections] + [1])
        self.pat = np.full((n_coll, p_max, s_max), -1, np.int8)
        self.n_pat = np.zeros(n_coll, np.int64)
        for ci, c in enumerate(self.collections):
            sets = sets_of[c]
            idx = {s.name: i for i, s in enumerate(sets)}
            for p, row in enumerate(model.patterns[c]):
                for i, s in enumerate(sets):
                    reachable = s.parent is None or row[idx[s.parent]]
                    self.pat[ci, p, i] = 1 if row[i] else (0 if reachable else -1)
            self.n_pat[ci] = len(model.patterns[c])
        spec = {s.name: s for s in sp.sets}
        self.set_cuts = [one_sided(spec[name].cuts) for name in self.set_names]
        self.set_coll = [spec[name].collection for name in self.set_names]
        self.gidx = gidx
        #: :func:`walk_table`'s tables by point (a pass's chunks share them)
        self.walks: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # one collection, one set ("out" adds nothing, "in" moves the counts): the
        # one-set walk (:func:`analysis.select.chainwalk.cut_walk`) serves it
        self.one_set = bool(
            n_coll == 1 and self.n_coll_sets[0] == 1 and self.n_pat[0] == 2
            and self.pat[0, 0, 0] == 0 and self.pat[0, 1, 0] == 1
        )


@lru_cache(maxsize=64)
def _tables(plan: Plan) -> _Tables:
    return _Tables(plan)


def chunk_fields(cols, collections, sets) -> dict:
    """The flat fields of ``collections`` in the chunk ``cols`` (a
    :class:`~analysis.pipeline.layout.ChunkColumns`), by collection: a collection absent
    from the columns (a chunk of no events) has the fields of ``sets.fields``, empty."""
    fields = dict(sets.fields)
    return {c: cols.collections[c][1] if c in cols.collections
            else {f_: np.zeros(0) for f_ in fields.get(c, ())} for c in collections}


def offsets(cols, collections, sets) -> tuple[np.ndarray, np.ndarray, dict, int]:
    """``(coff, base, flats, max_seq)`` of the chunk ``cols`` over ``collections``:
    ``coff``, ``base`` and ``max_seq`` of
    :meth:`~analysis.pipeline.layout.ChunkColumns.object_offsets` (kept with the columns:
    never written by a caller), ``flats`` of :func:`chunk_fields`."""
    coff, base, max_seq = cols.object_offsets(tuple(collections))
    return coff, base, chunk_fields(cols, collections, sets), max_seq


def chain(tgt: np.ndarray) -> np.ndarray:
    """The states ``0, tgt[0], tgt[tgt[0]], ...`` up to the absorbing one (``tgt[k] = k``):
    the only ones one set's objects reach (one pattern adds to the counts)."""
    out = [0]
    while tgt[out[-1]] != out[-1] and len(out) <= len(tgt):
        out.append(int(tgt[out[-1]]))
    return np.array(out, np.int64)


def _targets(model: CountModel, caps: np.ndarray, collections) -> np.ndarray:
    """``(C, P_max, S)`` states after adding one object of each pattern, with caps ``caps``."""
    shape = tuple(int(c) + 1 for c in caps)
    n_states = math.prod(shape)
    grid = np.indices(shape).reshape(len(shape), -1).T if shape else np.zeros((1, 0), np.int64)
    p_max = max([len(model.patterns[c]) for c in collections] + [1])
    out = np.zeros((len(collections), p_max, n_states), np.int64)
    for ci, c in enumerate(collections):
        d = model.increments[c]
        for p in range(len(d)):
            new = np.minimum(grid + d[p][None, :], caps[None, :])
            out[ci, p] = np.ravel_multi_index(tuple(new.T), shape) if shape else 0
    return out


def _reduced(model: CountModel, f: np.ndarray, df: np.ndarray):
    """Caps lowered to the last state where ``f`` or ``df`` still changes along each
    count variable: the states above merge into the absorbing top one (same sums,
    exactly: the table is constant there). Returns ``(caps, f, df)`` on the new states."""
    shape = model.shape
    caps = np.array([s - 1 for s in shape], np.int64)
    if not shape:
        return caps, f, df
    g = np.concatenate([f.reshape(shape + (1,)), df.reshape(shape + (df.shape[-1],))], -1)
    for v in range(len(shape)):
        top = shape[v] - 1
        while top > 0:
            a = np.take(g, [top], axis=v)
            b = np.take(g, [top - 1], axis=v)
            if not np.array_equal(a, b):
                break
            top -= 1
        caps[v] = top
        g = np.take(g, np.arange(top + 1), axis=v)
    n = int(np.prod(caps + 1))
    return caps, np.ascontiguousarray(g[..., 0].reshape(n)), np.ascontiguousarray(
        g[..., 1:].reshape(n, -1))


def walk_table(tab: _Tables, sets, theta: np.ndarray, widths: np.ndarray,
               trainable: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tgt, f, df)`` of a walk over ``tab``'s count model: :func:`_targets` and the
    pass table with its tangents in the ``trainable`` count thresholds
    (:func:`_pass_table`, :func:`_reduced`); without counts one state, ``f = 1``.
    Made once per pass, not per chunk (kept with ``tab`` by the point: the chunks of a
    pass share it; 0.2-0.3 ms of numpy each), each caller given its own copies."""
    theta = np.asarray(theta, np.float64)
    widths = np.asarray(widths, np.float64)
    key = (tuple(sets.thresholds), tuple(sets.count_widths), theta.tobytes(),
           widths.tobytes(), tuple(trainable))
    # tab: the tables of a plan equal to the one of ``sets`` (kept by the plan's value:
    # its model may be another, equal object)
    mine = sets.model is tab.model or sets.model == tab.model
    kept = tab.walks.get(key) if mine else None
    if kept is None:
        kept = _walk_table(tab, sets, theta, widths, trainable)
        if mine:
            if len(tab.walks) >= _WALKS:  # a pass's points: the oldest go first
                tab.walks.pop(next(iter(tab.walks)))
            tab.walks[key] = kept
    return tuple(a.copy() for a in kept)


#: walk tables kept per :class:`_Tables` (one per point: a pass's chunks share one)
_WALKS = 8


def _walk_table(tab: _Tables, sets, theta: np.ndarray, widths: np.ndarray,
                trainable: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if tab.model.counts:
        caps, f, df = _reduced(tab.model, *_pass_table(sets, theta, widths, trainable))
    else:
        caps, f, df = np.zeros(0, np.int64), np.ones(1), np.zeros((1, len(trainable)))
    return _targets(tab.model, caps, tab.collections), f, df


def _value(theta: np.ndarray, param: int | None, value: float | None) -> float:
    return float(threshold_value(theta, param, value))


def _par_index(trainable: tuple[int, ...], param: int | None) -> int:
    return trainable.index(param) if param is not None and param in trainable else -1


def _pass_table(sp, theta: np.ndarray, widths: np.ndarray,
                trainable: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The pass table ``f`` (``(S,)``) of the sets' count model over all its states and
    its tangents ``df`` (``(S, len(trainable))``) with respect to the trainable count
    thresholds: the JAX definition (:func:`analysis.pipeline.backends.numba._fasttables._pass_fn`),
    not reduced (``sp.model.counts`` must not be empty)."""
    th = np.array([_value(theta, p, v) for p, v in sp.thresholds])
    cw = np.array([0.0 if i is None else widths[i] for i in sp.count_widths])
    f, slope = _pass_fn(sp.model, th.tobytes(), cw.tobytes())  # (S,), (S, n_counts)
    df = np.zeros((f.shape[0], len(trainable)))
    for m, (param, _) in enumerate(sp.thresholds):
        k = _par_index(trainable, param)
        if k >= 0:
            df[:, k] += slope[:, m]
    return f, df


@lru_cache(maxsize=16)
def _pass_fn(model: CountModel, th: bytes, cw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(f, df/dthresholds)`` of :func:`analysis.select.objects._pass_table` at the
    thresholds and widths ``th``, ``cw`` (float64 bytes): once per pass, not per chunk, as
    one compiled program (:func:`analysis.stats._programs.program_call`, keyed by the
    model's description: its sets and counts). Read-only. The program takes the numpy
    arrays as they are: ``jnp.asarray`` of one is a compiled program of its own per shape
    (JAX's ``stage``: 10-15 ms at a new process's first step)."""

    def table(t, w):
        return _jax_pass_table(model, t, w)[0]

    def run(t, w, *, model_repr: str):
        return table(t, w), jax.jacfwd(table)(t, w)

    f_j, slope = program_call("pass_table", run, np.frombuffer(th), np.frombuffer(cw),
                              model_repr=repr(model))
    f, slope = np.asarray(f_j, np.float64), np.asarray(slope, np.float64)
    f.flags.writeable = slope.flags.writeable = False
    return f, slope


def walk_args(tab: _Tables, sets, coff: np.ndarray, base: np.ndarray, max_seq: int, pv_all,
              pd_all, h: int, tgt: np.ndarray, fs: np.ndarray, dfs, ow_keys: list,
              sums: tuple, block: int, pe: np.ndarray, ow: np.ndarray, sa: np.ndarray, *,
              rankidx: np.ndarray | None = None, leading: tuple | None = None,
              lw_keys: list = (), lw: np.ndarray | None = None) -> tuple:
    """The arguments of :func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk`
    before its block range, over ``tab``'s count model (``sets``: the plan's sets): the
    object offsets ``coff``, ``base``, ``max_seq`` (:func:`offsets`), the pattern
    probabilities and tangents ``pv_all``, ``pd_all`` (``0.0``: values alone) with the
    second variant's value lane ``h``, the targets and pass tables ``tgt``, ``fs``,
    ``dfs`` (``0.0`` with ``pd_all``), object-weight slots ``ow_keys`` ``[(region
    position, set), ...]``, the event sums' ``(sum_x, sum_has, binom)``, the outputs.
    ``rankidx``: the walk order (None: the objects' own); ``leading``: ``(ld_keys,
    ld_mask, ld_c, ld_ls, ld_d)`` of the leading targets ``[(set, depth), ...]`` with their
    weight slots ``lw_keys`` ``[(region position, set, depth), ...]`` into ``lw`` (None:
    none)."""
    if leading is None:
        none = np.zeros(0, np.int64)
        leading = ([], np.zeros((1, 1, fs.shape[1]), np.bool_), none, none, none)
    ld_keys, ld_mask, ld_c, ld_ls, ld_d = leading
    idx = np.arange(int(base[-1]), dtype=np.int64) if rankidx is None else rankidx
    return (coff, base, idx, pv_all, pd_all, h, tab.pat, tab.n_pat, tgt, fs, dfs,
            np.array([q for q, _ in ow_keys], np.int64),
            np.array([tab.collections.index(sets.collection_of(s)) for _, s in ow_keys],
                     np.int64),
            np.array([tab.local[s] for _, s in ow_keys], np.int64), ld_c, ld_ls, ld_d,
            np.array([q for q, _, _ in lw_keys], np.int64),
            np.array([ld_keys.index((s, d)) for _, s, d in lw_keys], np.int64), ld_mask,
            *sums, max(max_seq, 1), int(ld_d.max(initial=0)), block, pe, ow,
            np.zeros((1, 0, 0, pe.shape[-1])) if lw is None else lw, sa)
