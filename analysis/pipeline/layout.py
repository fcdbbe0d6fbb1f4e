"""The column layout of a chunk, and its padding to bucket sizes for the kernels.

:class:`ChunkColumns` is what :func:`analysis.data.columns.extract_columns` builds from
NanoEvents and what the column cache keeps (with the object offsets the numba loops
index, :meth:`ChunkColumns.object_offsets`, and weights derived from the chunk's own, a
validation part's, :meth:`ChunkColumns.derived_weight`, and a part's events alone,
:meth:`ChunkColumns.subset`, made on a chunk's first pass);
:func:`pad_columns` turns it into the fixed-shape arrays the JAX kernels compile for (a
few bucket sizes per axis, so a long run compiles a handful of shapes, not one per
chunk).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from analysis.pipeline.plan import Plan

__all__ = ["ChunkColumns", "Padding", "Shapes", "bucket", "pad_columns"]

#: ChunkColumns' memos (instance attributes, not fields: never pickled)
_MEMOS = ("_offsets", "_weights", "_subsets")


@dataclass
class ChunkColumns:
    """Columns of one chunk.

    ``weight``: per-event weight (float64; ones without a weight branch);
    ``uid``: the event's number in [0, 1) of :mod:`analysis.pipeline.split` (float64;
    ``None`` for columns not read from a file);
    ``events``: per-event branches; ``collections``: collection -> ``(counts, {field:
    flat values})`` (``counts``: int64 objects per event; values float64, all objects of
    all events back to back).
    """

    n_events: int
    weight: np.ndarray
    events: dict[str, np.ndarray] = field(default_factory=dict)
    collections: dict[str, tuple[np.ndarray, dict[str, np.ndarray]]] = field(
        default_factory=dict
    )
    uid: np.ndarray | None = None

    def __post_init__(self) -> None:
        # object_offsets' and derived_weight's memos: not dataclass fields (not spilled,
        # counted or compared)
        self._offsets: dict[tuple[str, ...], tuple] = {}
        self._weights: dict[Hashable, tuple] = {}
        self._subsets: dict[Hashable, tuple] = {}

    def __getstate__(self) -> dict:
        # columns sent to or from a worker travel without the memos (rebuilt there once)
        return {k: v for k, v in self.__dict__.items() if k not in _MEMOS}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, **{memo: {} for memo in _MEMOS})

    def derived_weight(self, key: Hashable, make: Callable[[], np.ndarray]) -> np.ndarray:
        """``make()``: per-event weights made from these columns' ``weight`` and ``uid``
        alone (a validation part's, unit weights), made once per ``key`` and kept with
        the columns: a cached chunk's optimisation steps ask for the same ones every
        pass (a part's factor hashes nothing again: 0.3-0.4 ms per 100k events and
        step). Made again where ``weight`` or ``uid`` is not the array it was made from
        (checked, as :meth:`object_offsets` checks its counts); the caller must not
        write into it."""
        kept = self._weights.get(key)
        if kept is not None and kept[0] is self.weight and kept[1] is self.uid:
            return kept[2]
        out = make()
        self._weights[key] = (self.weight, self.uid, out)
        return out

    def subset(self, keep: np.ndarray | Callable[[], np.ndarray], *,
               key: Hashable | None = None) -> ChunkColumns:
        """The columns of the events where ``keep`` is True, in their order: a chunk of
        ``keep.sum()`` events whose ``weight``, ``uid``, per-event branches and each
        collection's counts are those events' entries and whose flat values are those
        events' objects, back to back (new arrays: these columns are not touched).

        Parameters
        ----------
        keep
            Bool ``(n_events,)``, or a function returning it (called only where the
            subset is made, not on a kept one's return).
        key
            None: made now. Else made once per ``key`` and kept with these columns (as
            :meth:`derived_weight` keeps its weights: a cached chunk's training steps walk
            the same training events every pass, ~5 ms of CPU per 100k demo events to
            copy; the copy's memory, ~70 % of the columns' at fraction 0.3, counts in the
            column cache's budget, which lets it go where it does not fit:
            :meth:`analysis.data.cache.ColumnCache.recount`); made again where any of
            these columns' arrays is not the one it was made from.

        Returns
        -------
        ChunkColumns
            Every field a dataclass field of these columns has, with fresh memos.
            ``keep`` all False, or a chunk of 0 events: a chunk of 0 events with the same
            branches, collections and fields (empty arrays of their dtypes).

        Raises
        ------
        ValueError
            ``keep`` not of shape ``(n_events,)``.
        """
        sources = None
        if key is not None:
            # identity of every array the subset copies (a replace()d copy shares the memo)
            sources = (self.weight, self.uid, *self.events.values(),
                       *(a for counts, flat in self.collections.values()
                         for a in (counts, *flat.values())))
            kept = self._subsets.get(key)
            if kept is not None and len(kept[0]) == len(sources) and all(
                    a is b for a, b in zip(kept[0], sources, strict=True)):
                return kept[1]
        mask = np.asarray(keep() if callable(keep) else keep, dtype=bool)
        if mask.shape != (int(self.n_events),):
            raise ValueError(f"subset: keep has shape {mask.shape}, expected "
                             f"({int(self.n_events)},) (one per event)")
        collections = {}
        for name, (counts, flat) in self.collections.items():
            counts = np.asarray(counts)
            objects = np.repeat(mask, counts)  # each object kept with its event
            collections[name] = (counts[mask], {f: v[objects] for f, v in flat.items()})
        out = replace(self, n_events=int(np.count_nonzero(mask)),
                      weight=np.asarray(self.weight)[mask],
                      events={k: np.asarray(v)[mask] for k, v in self.events.items()},
                      collections=collections,
                      uid=None if self.uid is None else np.asarray(self.uid)[mask])
        if key is not None:
            self._subsets[key] = (sources, out)
        return out

    def memo_nbytes(self) -> int:
        """Bytes of the arrays these columns' memos keep (:meth:`object_offsets`,
        :meth:`derived_weight`, :meth:`subset` with a key): memory the fields do not
        show, which :meth:`analysis.data.cache.ColumnCache.recount` adds to the chunk's.

        Returns
        -------
        int
            0 where nothing is kept.
        """
        offsets = sum(a.nbytes for _, (coff, base, _m) in self._offsets.values()
                      for a in (coff, base))
        weights = sum(out.nbytes for *_, out in self._weights.values())
        subsets = sum(out.nbytes() for _, out in self._subsets.values())
        return int(offsets + weights + subsets)

    def nbytes(self) -> int:
        """Bytes held by the arrays of these columns' fields (not their memos:
        :meth:`memo_nbytes`)."""
        return sum(a.nbytes for f in dataclasses.fields(self)
                   for a in _arrays(getattr(self, f.name)))

    def forget_subsets(self) -> None:
        """Let go of the subsets :meth:`subset` keeps (a later call makes them again)."""
        self._subsets.clear()

    def object_offsets(self, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, int]:
        """The objects of the collections ``names`` as the host loops index them, made
        once per columns and kept with them (a chunk in the column cache gets them on its
        first pass, not on every pass: 0.6-1.2 ms per 125-250k events).

        Parameters
        ----------
        names
            Collections, in the loops' order; one absent from the columns (a chunk of
            no events) has no objects.

        Returns
        -------
        tuple
            ``(coff, base, max_seq)``: ``coff`` ``(C, E + 1)`` each collection's object
            offsets, ``base`` ``(C + 1,)`` its first object's index over all of them,
            ``max_seq`` the most objects an event can have over all of them (read only:
            every later call gets the same arrays).
        """
        counts = tuple(self.collections[c][0] if c in self.collections else None
                       for c in names)
        kept = self._offsets.get(names)
        # kept while the counts are the ones it was made from (checked, not assumed: a
        # copy made by :meth:`replace` shares the memo and may hold other counts)
        if kept is not None and all(a is b for a, b in zip(kept[0], counts, strict=True)):
            return kept[1]
        n = int(self.n_events)
        coff = np.zeros((len(names), n + 1), np.int64)
        base = np.zeros(len(names) + 1, np.int64)
        max_seq = 0
        for ci, cnt in enumerate(counts):
            if cnt is not None:
                np.cumsum(np.asarray(cnt, dtype=np.int64), out=coff[ci, 1:])
                max_seq += int(np.max(cnt, initial=0))
            base[ci + 1] = base[ci] + coff[ci, -1]
        self._offsets[names] = (counts, (coff, base, max_seq))
        return coff, base, max_seq

    def replace(self, **changes: Any) -> ChunkColumns:
        """:func:`dataclasses.replace` of these columns (``changes``: fields), sharing
        :meth:`object_offsets`', :meth:`derived_weight`'s and :meth:`subset`'s
        memos: columns derived each pass from cached ones (moved fields, learned scores,
        a part's weights) keep the cached counts, and their offsets with them (each memo
        checks what it was made from)."""
        out = replace(self, **changes)
        for memo in _MEMOS:
            setattr(out, memo, getattr(self, memo))
        return out


def _arrays(value: Any) -> list[np.ndarray]:
    """Every array in a nest of dicts, tuples and lists (``ChunkColumns.collections``
    holds ``{name: (counts, {field: values})}``)."""
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _arrays(v)]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _arrays(v)]
    return []


# --- padding to bucket sizes -----------------------------------------------------
# Chunks differ in size; jit compiles once per distinct input shape. Padding the
# event and object axes to powers of two bounds the number of compilations by the
# number of distinct (events, objects, max multiplicity) buckets a run meets.
#
# A compilation costs ~1.5 s, as much as running ~1M events through the compiled
# kernel, while a chunk of a few thousand events runs in ~1-2 ms whatever its padding.
# One rule for every plan (:class:`Padding`, an option of the JAX backend): events to a
# power of two >= ``events``, each collection's objects to a power of two >= ``objects``,
# and the per-event object axis (the dense ``(events, M)`` layout of
# :mod:`analysis.select.objects`) to a power of two >= ``max_count``. Where an
# observable indexes a collection (``S[i]``: ``C(M, i + 1)`` candidates per padded
# event) M is the chunk's largest multiplicity rounded up to SET_OBJECT_STEP instead,
# and the event floor is ``events_indexed``: the padding costs more than the
# compilations there (AGC trijet on the 2015 file: C(11, 3) = 165 candidates instead of
# 220 at M = 12 cut the gradient pass by 25%).
SET_OBJECT_STEP = 1


@dataclass(frozen=True)
class Padding:
    """The floors of :func:`pad_columns`' bucket sizes (each a power of two).

    More padding changes no result (padding entries have zero weight and zero
    multiplicity), only how often the JAX kernels compile and how long a pass runs.

    Parameters
    ----------
    events
        Fewest padded events of a chunk.
    objects
        Fewest padded objects of a collection.
    max_count
        Fewest slots of the per-event object axis (a collection no observable indexes).
    events_indexed
        Fewest padded events where an observable indexes a collection.
    """

    events: int = 1024
    objects: int = 4096
    max_count: int = 16
    events_indexed: int = 64


def bucket(n: int, minimum: int = 64) -> int:
    """Smallest power of two >= max(n, minimum) (``minimum`` should be a power of two)."""
    n = max(int(n), minimum)
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class Shapes:
    events: int
    # ((collection, padded objects, max objects per event), ...)
    collections: tuple[tuple[str, int, int], ...] = ()
    # ((collection, width), ...): the static width of the subset enumeration of an
    # event-sum histogram (analysis.select.subsets.sum_bins) for every event, or
    # ((collection, ((width, events), ...)), ...): groups of events, each at its width
    # (their events: arrays["enum:<collection>"]); made by
    # analysis.pipeline.backends.jax.passes.enumeration_shapes. None: every object of the axis
    uncertain: tuple[tuple[str, Any], ...] | None = None
    # ((set, K), ...): per indexed set, the most objects of an event that can be in it
    # at the chunk's parameters (analysis.select.leading.can_be_in; made by
    # analysis.pipeline.backends.jax.passes.candidate_shapes): its candidate tuples are C(K, i + 1).
    # None: every object of the axis
    possible: tuple[tuple[str, int], ...] | None = None


def pad_columns(cols: ChunkColumns, plan: Plan, *,
                padding: Padding | None = None) -> tuple[dict[str, np.ndarray], Shapes]:
    """Pad ``cols`` with zero-weight entries to bucket sizes (floors: ``padding``).

    Parameters
    ----------
    cols
        One chunk's columns.
    plan
        The plan whose collections and fields are padded.
    padding
        The bucket floors (None: :class:`Padding`'s defaults).

    Returns
    -------
    tuple
        ``(arrays, shapes)``: ``weight``, ``event:<key>``, and per collection
        ``C:counts``, ``C:starts``, ``C:<field>``; the static :class:`Shapes`.
    """
    padding = Padding() if padding is None else padding
    n = cols.n_events
    e = bucket(n, padding.events_indexed if _indexed(plan) else padding.events)
    arrays: dict[str, np.ndarray] = {}
    w = np.zeros(e, dtype=np.float64)
    w[:n] = cols.weight
    arrays["weight"] = w
    for key, value in cols.events.items():
        padded = np.zeros(e, dtype=np.float64)
        padded[:n] = value
        arrays[f"event:{key}"] = padded
    return arrays, Shapes(e, _pad_sets(cols, plan, arrays, e, padding))


def _pad_sets(cols: ChunkColumns, plan: Plan, arrays: dict, e: int,
              padding: Padding) -> tuple:
    """Pad each collection of the object-set form into ``arrays`` (``C:counts``,
    ``C:starts``, ``C:<field>``); return the static ``Shapes.collections``."""
    n = cols.n_events
    shapes = []
    indexed = _indexed(plan)
    for name, fields in plan.sets.fields:
        counts_c, flat = cols.collections.get(name, (np.zeros(0, np.int64), {}))
        counts = np.zeros(e, dtype=np.int32)
        counts[:n] = counts_c
        total = int(counts.sum())
        o = bucket(total, padding.objects)
        top = int(counts.max(initial=0))
        if name in indexed:
            m = max(SET_OBJECT_STEP, -(-top // SET_OBJECT_STEP) * SET_OBJECT_STEP)
        else:
            m = bucket(top, padding.max_count)
        arrays[f"{name}:counts"] = counts
        arrays[f"{name}:starts"] = (np.cumsum(counts) - counts).astype(np.int32)
        for f in fields:
            padded = np.zeros(o, dtype=np.float64)
            padded[:total] = flat.get(f, np.zeros(0))
            arrays[f"{name}:{f}"] = padded
        shapes.append((name, o, m))
    return tuple(shapes)


def _indexed(plan: Plan) -> set[str]:
    """Collections that an observable indexes (``S[i]``, 4-vector sums, deltaR)."""
    sp = plan.sets
    out = {sp.collection_of(s) for pair in sp.nodes for node in pair if node is not None
           for s, _ in node.slots}
    # histograms of event sums enumerate the subsets of the objects (2^M): M exact too
    nodes = [h.node for h in plan.hists]
    out |= {sp.collection_of(n.head) for n in nodes if n.kind in ("sum", "count")}
    return out | {sp.collection_of(s) for n in nodes for s, _ in n.slots}
