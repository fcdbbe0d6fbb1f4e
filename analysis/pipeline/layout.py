"""The column layout of a chunk, and its padding to bucket sizes for the kernels.

:class:`ChunkColumns` is what :func:`analysis.data.columns.extract_columns` builds from
NanoEvents and what the column cache keeps; :func:`pad_columns` turns it into the
fixed-shape arrays the JAX kernels compile for (a few bucket sizes per axis, so a long
run compiles a handful of shapes, not one per chunk).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.pipeline.plan import Plan

__all__ = ["ChunkColumns", "Shapes", "bucket", "pad_columns"]


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
