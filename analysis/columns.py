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
from analysis.plan import Plan


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


def extract_columns(events, plan: Plan, *, weight_branch: str | None, source: str) -> ChunkColumns:
    """Read what ``plan`` needs from one chunk of ``events``.

    ``source`` (usually the file name) is named in every error message.
    """
    n = len(events)
    if weight_branch is not None:
        weight = _event_branch(events, weight_branch, source)
    else:
        weight = np.ones(n, dtype=np.float64)
    cols = ChunkColumns(n_events=n, weight=weight)
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
    return cols


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


def pad_columns(cols: ChunkColumns, plan: Plan) -> tuple[dict[str, np.ndarray], Shapes]:
    """Pad ``cols`` with zero-weight entries to bucket sizes; return arrays and shapes."""
    n = cols.n_events
    e = bucket(n, MIN_EVENTS)
    arrays: dict[str, np.ndarray] = {}
    w = np.zeros(e, dtype=np.float64)
    w[:n] = cols.weight
    arrays["weight"] = w
    for key, value in cols.events.items():
        padded = np.zeros(e, dtype=np.float64)
        padded[:n] = value
        arrays[f"event:{key}"] = padded
    o, lmax = 1, 1
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
