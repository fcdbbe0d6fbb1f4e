"""Reading a chunk: from NanoEvents (or any awkward record array) to flat numpy columns.

This is the only module that touches awkward event records. The maths
(:mod:`analysis.kernel`) sees plain arrays padded to a few bucket sizes, so that a
future column cache can hand it the same arrays without re-reading ROOT.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

import awkward as ak
import numpy as np

from analysis.errors import InputError
from analysis.faults import NONFINITE_POLICIES, note_dropped
from analysis.objects import check_counts
from analysis.plan import Plan

__all__ = [
    "ChunkColumns",
    "Shapes",
    "bucket",
    "extract_columns",
    "pad_columns",
]


@dataclass
class ChunkColumns:
    """Columns of one chunk.

    ``weight``: per-event weight (float64; ones without a weight branch);
    ``counts``: objects per event in the selection collection (``None`` without one);
    ``objects``: flat per-object fields; ``events``: per-event branches.
    """

    n_events: int
    weight: np.ndarray
    counts: np.ndarray | None = None
    objects: dict[str, np.ndarray] = field(default_factory=dict)
    events: dict[str, np.ndarray] = field(default_factory=dict)
    # The object-set form (plan.sets): collection -> (counts, {field: flat values}).
    collections: dict[str, tuple[np.ndarray, dict[str, np.ndarray]]] = field(
        default_factory=dict
    )


def _missing(what: str, name: str, available: list[str], source: str) -> InputError:
    close = difflib.get_close_matches(name, available, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return InputError(f"{source}: no {what} {name!r}{hint}")


def _get(record, name: str, what: str, source: str):
    fields = list(getattr(record, "fields", []) or [])
    if name not in fields:
        raise _missing(what, name, fields, source)
    return record[name]


def _event_branch(events, key: str, source: str) -> np.ndarray:
    fields = list(events.fields)
    if "." in key:
        head, tail = key.split(".", 1)
        value = _get(_get(events, head, "branch", source), tail, f"field of {head}", source)
    elif key in fields:
        value = events[key]
    elif "_" in key and key.split("_", 1)[0] in fields:
        # NanoAODSchema groups MET_pt into MET.pt; accept the flat branch name too.
        head, tail = key.split("_", 1)
        value = _get(events[head], tail, f"field of {head}", source)
    else:
        raise _missing("branch", key, fields, source)
    layout = ak.to_layout(value)
    if layout.purelist_depth != 1 or not hasattr(value, "to_numpy"):
        raise InputError(
            f"{source}: branch {key!r} is not one number per event (type {ak.type(value)}); "
            "per-object quantities need the selection collection or sum()/count()"
        )
    return np.asarray(ak.to_numpy(value), dtype=np.float64)


def extract_columns(
    events,
    plan: Plan,
    *,
    weight_branch: str | None,
    source: str,
    nonfinite: str | None = None,
) -> ChunkColumns:
    """Read what ``plan`` needs from one chunk of ``events``.

    ``source`` (usually the file name) is named in every error message.

    Non-finite values (NaN, +-inf) in any column read, weights included, are never
    passed on: with ``nonfinite="error"`` (the default) they raise an
    :class:`InputError` naming ``source``, the branch and the first such entry (the
    entry number in the file: the chunk's ``entrystart`` from ``events.metadata`` is
    added); with ``"drop"`` the objects with a non-finite field, then the events with
    a non-finite weight or per-event branch, are removed and their numbers noted
    (:func:`analysis.faults.note_dropped`). ``None`` takes the policy from
    ``events.metadata["nonfinite"]`` (set by the driver for every chunk), else ``"error"``.
    """
    meta = getattr(events, "metadata", None) or {}
    policy = nonfinite or meta.get("nonfinite") or "error"
    if policy not in NONFINITE_POLICIES:
        raise ValueError(f"nonfinite must be one of {NONFINITE_POLICIES}, got {policy!r}")
    n = len(events)
    if weight_branch is not None:
        weight = _event_branch(events, weight_branch, source)
    else:
        weight = np.ones(n, dtype=np.float64)
    cols = ChunkColumns(n_events=n, weight=weight)
    if plan.sets is not None:
        for name, fields in plan.sets.fields:
            coll = _get(events, name, "collection", source)
            counts = np.asarray(ak.to_numpy(ak.num(coll, axis=1)), dtype=np.int64)
            if name in plan.sets.caps:  # objects.<set>.max_objects: one line, no truncation
                check_counts(counts, plan.sets.caps[name], collection=name, source=source,
                             offset=int(meta.get("entrystart") or 0), key=plan.sets.cap_keys[name])
            flat = {
                f: np.asarray(
                    ak.to_numpy(ak.flatten(_get(coll, f, f"field of {name}", source))),
                    dtype=np.float64,
                )
                for f in fields
            }
            cols.collections[name] = (counts, flat)
    if plan.collection is not None:
        coll = _get(events, plan.collection, "collection", source)
        cols.counts = np.asarray(ak.to_numpy(ak.num(coll, axis=1)), dtype=np.int64)
        for name in plan.object_fields:
            cols.objects[name] = np.asarray(
                ak.to_numpy(ak.flatten(_get(coll, name, f"field of {plan.collection}", source))),
                dtype=np.float64,
            )
    for key in plan.event_keys:
        cols.events[key] = _event_branch(events, key, source)
    return _finite(
        cols,
        plan,
        weight_branch=weight_branch,
        policy=policy,
        source=source,
        offset=int(meta.get("entrystart") or 0),
    )


def _object_branch(plan: Plan, name: str) -> str:
    return f"{plan.collection}_{name}"  # the NanoAOD branch name, as users know it


def _finite(
    cols: ChunkColumns,
    plan: Plan,
    *,
    weight_branch: str | None,
    policy: str,
    source: str,
    offset: int,
) -> ChunkColumns:
    """``cols`` without non-finite values (see :func:`extract_columns`)."""
    if cols.collections:
        return _finite_sets(cols, weight_branch=weight_branch, policy=policy, source=source,
                            offset=offset)
    object_bad = {_object_branch(plan, k): ~np.isfinite(v) for k, v in cols.objects.items()}
    event_bad = {k: ~np.isfinite(v) for k, v in cols.events.items()}
    if weight_branch is not None:
        event_bad = {weight_branch: ~np.isfinite(cols.weight), **event_bad}
    object_bad = {k: m for k, m in object_bad.items() if m.any()}
    event_bad = {k: m for k, m in event_bad.items() if m.any()}
    if not object_bad and not event_bad:
        return cols
    counts = cols.counts if cols.counts is not None else np.zeros(cols.n_events, np.int64)
    event_of_object = np.repeat(np.arange(cols.n_events), counts)
    if policy == "error":
        first = []  # (entry, branch, value)
        for branch, m in object_bad.items():
            i = int(np.argmax(m))
            field = branch[len(plan.collection) + 1 :]
            first.append((int(event_of_object[i]), branch, cols.objects[field][i]))
        for branch, m in event_bad.items():
            i = int(np.argmax(m))
            value = cols.weight[i] if branch == weight_branch else cols.events[branch][i]
            first.append((i, branch, value))
        entry, branch, value = min(first, key=lambda t: t[0])
        raise InputError(
            f"{source}: branch {branch!r} has a non-finite value ({value}) at entry "
            f"{offset + entry}; expected finite numbers (or set 'nonfinite: drop' to drop "
            "such objects and events)"
        )
    keep_obj = np.ones(len(event_of_object), dtype=bool)
    for branch, m in object_bad.items():
        note_dropped(branch, objects=int((m & keep_obj).sum()))
        keep_obj &= ~m
    keep_ev = np.ones(cols.n_events, dtype=bool)
    for branch, m in event_bad.items():
        note_dropped(branch, events=int((m & keep_ev).sum()))
        keep_ev &= ~m
    keep_obj &= keep_ev[event_of_object]
    new_counts = np.bincount(event_of_object[keep_obj], minlength=cols.n_events)
    return ChunkColumns(
        n_events=int(keep_ev.sum()),
        weight=cols.weight[keep_ev],
        counts=None if cols.counts is None else new_counts[keep_ev].astype(np.int64),
        objects={k: v[keep_obj] for k, v in cols.objects.items()},
        events={k: v[keep_ev] for k, v in cols.events.items()},
    )


def _finite_sets(
    cols: ChunkColumns, *, weight_branch: str | None, policy: str, source: str, offset: int
) -> ChunkColumns:
    """:func:`_finite` of the object-set form: an error naming the first bad entry, or
    with ``drop`` the events holding any non-finite value (objects included) are
    removed and counted (an object cannot be dropped alone without changing the
    event's counts and indices, so the whole event goes)."""
    bad_events: dict[str, np.ndarray] = {}
    for name, (counts, flat) in cols.collections.items():
        event_of = np.repeat(np.arange(cols.n_events), counts)
        for f, v in flat.items():
            m = ~np.isfinite(v)
            if m.any():
                bad_events[f"{name}_{f}"] = np.bincount(
                    event_of[m], minlength=cols.n_events
                ).astype(bool)
    for key, v in cols.events.items():
        if not np.isfinite(v).all():
            bad_events[key] = ~np.isfinite(v)
    if weight_branch is not None and not np.isfinite(cols.weight).all():
        bad_events[weight_branch] = ~np.isfinite(cols.weight)
    if not bad_events:
        return cols
    if policy == "error":
        branch, m = min(bad_events.items(), key=lambda kv: int(np.argmax(kv[1])))
        raise InputError(
            f"{source}: branch {branch!r} has a non-finite value at entry "
            f"{offset + int(np.argmax(m))}; expected finite numbers (or set "
            "'nonfinite: drop' to drop such events)"
        )
    keep = np.ones(cols.n_events, dtype=bool)
    for branch, m in bad_events.items():
        note_dropped(branch, events=int((m & keep).sum()))
        keep &= ~m
    out = {}
    for name, (counts, flat) in cols.collections.items():
        keep_obj = np.repeat(keep, counts)
        out[name] = (counts[keep], {f: v[keep_obj] for f, v in flat.items()})
    return ChunkColumns(
        n_events=int(keep.sum()), weight=cols.weight[keep],
        events={k: v[keep] for k, v in cols.events.items()}, collections=out,
    )


# --- padding to bucket sizes -----------------------------------------------------
# Chunks differ in size; jit compiles once per distinct input shape. Padding the
# event and object axes to powers of two bounds the number of compilations by the
# number of distinct (events, objects, max multiplicity) buckets a run meets.
#
# A compilation costs ~1.5 s, as much as running ~1M events through the compiled
# kernel, while a chunk of a few thousand events runs in ~1-2 ms whatever its
# padding. So small chunks all share one floor shape (MIN_EVENTS events,
# MIN_OBJECTS objects), and the per-event loop starts at MIN_MAX_COUNT objects
# (multiplicities 9..16 are common, so a floor of 8 flip-flopped between 8 and 16).
# 100 chunks of 50..5000 events with Poisson(4) objects: 6..13 shapes (over 300
# seeds) with the former 64/64/8 floors, 4..8 with these. The object floor is not
# higher because a hard-cut grid scan of a small file pays for it on every point.
# Larger chunks keep power-of-two buckets on each axis: padding them further (e.g.
# objects >= 8 x events) would avoid the second object bucket that a chunk whose
# object count straddles a power of two opens, but costs every chunk of a long run.
MIN_EVENTS = 1024
MIN_OBJECTS = 4096
MIN_MAX_COUNT = 16


def bucket(n: int, minimum: int = 64) -> int:
    """Smallest power of two >= max(n, minimum) (``minimum`` should be a power of two)."""
    n = max(int(n), minimum)
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class Shapes:
    events: int
    objects: int
    max_count: int  # static length of the per-event loop over objects
    # The object-set form: ((collection, padded objects, max objects per event), ...).
    collections: tuple[tuple[str, int, int], ...] = ()


def pad_columns(cols: ChunkColumns, plan: Plan) -> tuple[dict[str, np.ndarray], Shapes]:
    """Pad ``cols`` with zero-weight entries to bucket sizes; return arrays and shapes."""
    n = cols.n_events
    # The object-set kernel's cost per padded event is much higher (joint count states,
    # candidates): a smaller event floor there.
    e = bucket(n, MIN_EVENTS if plan.sets is None else SET_MIN_EVENTS)
    arrays: dict[str, np.ndarray] = {}
    w = np.zeros(e, dtype=np.float64)
    w[:n] = cols.weight
    arrays["weight"] = w
    for key, value in cols.events.items():
        padded = np.zeros(e, dtype=np.float64)
        padded[:n] = value
        arrays[f"event:{key}"] = padded
    o, lmax = 1, 1
    if plan.sets is not None:
        return arrays, Shapes(e, o, lmax, _pad_sets(cols, plan, arrays, e))
    if cols.counts is not None:
        counts = np.zeros(e, dtype=np.int32)
        counts[:n] = cols.counts
        total = int(counts.sum())
        o = bucket(total, MIN_OBJECTS)
        lmax = bucket(int(counts.max(initial=0)), MIN_MAX_COUNT)
        arrays["counts"] = counts
        arrays["starts"] = (np.cumsum(counts) - counts).astype(np.int32)
        seg = np.full(o, e - 1, dtype=np.int32)
        seg[:total] = np.repeat(np.arange(e, dtype=np.int32), counts)
        arrays["segment"] = seg
        valid = np.zeros(o, dtype=bool)
        valid[:total] = True
        arrays["valid"] = valid
        for key, value in cols.objects.items():
            padded = np.zeros(o, dtype=np.float64)
            padded[:total] = value
            arrays[f"object:{key}"] = padded
    return arrays, Shapes(e, o, lmax)


# Per-event object axis of the object-set form: padded to a multiple of SET_OBJECT_STEP
# (not a power of two): indexed observables cost C(M, i + 1) candidates, so the exact
# chunk maximum is used (AGC trijet on the 2015 file: C(11, 3) = 165 candidates instead
# of 220 at M = 12 cut the gradient pass by 25%) at the price of one compilation per
# distinct maximum multiplicity among chunks.
SET_OBJECT_STEP = 1
SET_MIN_EVENTS = 64


def _pad_sets(cols: ChunkColumns, plan: Plan, arrays: dict, e: int) -> tuple:
    """Pad each collection of the object-set form into ``arrays`` (``C:counts``,
    ``C:starts``, ``C:<field>``); return the static ``Shapes.collections``."""
    n = cols.n_events
    shapes = []
    for name, fields in plan.sets.fields:
        counts_c, flat = cols.collections.get(name, (np.zeros(0, np.int64), {}))
        counts = np.zeros(e, dtype=np.int32)
        counts[:n] = counts_c
        total = int(counts.sum())
        o = bucket(total, MIN_OBJECTS)
        top = int(counts.max(initial=0))
        m = max(SET_OBJECT_STEP, -(-top // SET_OBJECT_STEP) * SET_OBJECT_STEP)
        arrays[f"{name}:counts"] = counts
        arrays[f"{name}:starts"] = (np.cumsum(counts) - counts).astype(np.int32)
        for f in fields:
            padded = np.zeros(o, dtype=np.float64)
            padded[:total] = flat.get(f, np.zeros(0))
            arrays[f"{name}:{f}"] = padded
        shapes.append((name, o, m))
    return tuple(shapes)
