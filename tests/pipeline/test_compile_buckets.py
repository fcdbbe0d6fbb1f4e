"""Chunks of any size share a handful of compiled kernels.

``jax.jit`` compiles once per distinct input shape (~1.5 s each, as much as
running ~1M events), so ``pad_columns`` pads every chunk, with zero-weight
entries, to a few bucket shapes. 100 chunks of 50..5000 events with Poisson(4)
jets must compile the kernel at most 10 times, and padding must not change any
result. (The padded JAX kernel, forced with ``engine="jax"``; ``chunk_state`` runs the
unpadded numba kernel by default.)
"""

from __future__ import annotations

import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.pipeline.backend import Backend, chunk_state
from analysis.pipeline.backends.jax import passes as kernel
from analysis.pipeline.layout import ChunkColumns, Padding, pad_columns
from analysis.pipeline.plan import build_plan
from analysis.pipeline.results import dataset_report
from tests.chunked_helpers import analysis_config, differences

MAX_COMPILATIONS = 10


def _plan(name: str):
    """The issue's selection with one observable; ``name`` makes the plan (a static
    jit argument) distinct, so that its compilations are counted from zero."""
    data = analysis_config()
    data["observables"] = [{"name": name, "x": "Jet.pt", "stats": ["mean", "var"]}]
    return build_plan(config_from_dict(data))


def _random_chunk(rng: np.random.Generator, mean_jets: float = 4.0) -> ChunkColumns:
    n = int(rng.integers(50, 5001))
    counts = rng.poisson(mean_jets, n)
    total = int(counts.sum())
    return ChunkColumns(
        n_events=n,
        weight=rng.exponential(1.0, n),
        collections={"Jet": (counts, {"pt": rng.exponential(40.0, total),
                                      "eta": rng.normal(0.0, 2.0, total)})},
    )


THETA = np.array([30.0, 2.4, 2.0])
WIDTHS = np.array([5.0, 0.1, 1.0])  # two object cuts, then the count cut's integer smoothing


@pytest.mark.slow
def test_100_random_chunks_compile_at_most_10_times() -> None:
    plan = _plan("compile_count")
    rng = np.random.default_rng(12345)
    before = kernel._evaluate._cache_size()
    shapes = set()
    merged = None
    for _ in range(100):
        cols = _random_chunk(rng)
        shapes.add(pad_columns(cols, plan)[1])
        state = chunk_state(cols, plan, THETA, WIDTHS, backend="jax")
        merged = state if merged is None else merged + state
        # Stop early rather than compile dozens of shapes when bucketing regresses.
        assert kernel._evaluate._cache_size() - before <= MAX_COMPILATIONS, len(shapes)
    compilations = kernel._evaluate._cache_size() - before
    # One compilation per distinct padded shape, and few of them.
    assert compilations == len(shapes)
    assert compilations <= MAX_COMPILATIONS, sorted((s.events, s.collections) for s in shapes)
    assert merged.chunks == 100 and merged.events > 100 * 50


def test_bucket_count_is_small_for_any_seed() -> None:
    # Shapes only (no compilation): the bound must not depend on a lucky seed.
    # With the former 64/64/8 floors and independent power-of-two buckets this
    # gave 6..12 shapes over seeds; the kernel compiles once per shape.
    plan = _plan("shapes_only")
    counts = []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        counts.append(len({pad_columns(_random_chunk(rng), plan)[1] for _ in range(100)}))
    assert max(counts) <= MAX_COMPILATIONS, counts


@pytest.mark.parametrize("n_events", [1, 1023, 1024, 1025, 3000])
def test_padding_layout(n_events: int) -> None:
    plan = _plan("layout")
    rng = np.random.default_rng(n_events)
    counts = rng.poisson(4.0, n_events)
    counts[-1] = 17  # a long list: the per-event axis must cover it
    total = int(counts.sum())
    pt = rng.exponential(40.0, total)
    cols = ChunkColumns(n_events, rng.exponential(1.0, n_events),
                        collections={"Jet": (counts, {"pt": pt, "eta": -pt})})
    arrays, shapes = pad_columns(cols, plan)
    ((name, objects, max_count),) = shapes.collections
    assert name == "Jet"
    floors = Padding()
    for size, floor in (
        (shapes.events, floors.events),
        (objects, floors.objects),
        (max_count, floors.max_count),
    ):
        assert size >= floor and size & (size - 1) == 0  # a power of two
    assert shapes.events >= n_events and objects >= total and max_count >= 17
    assert shapes.events < 2 * max(n_events, floors.events)
    assert objects < 2 * max(total, floors.objects)
    # Padding is inert: zero event weight, zero multiplicity.
    np.testing.assert_array_equal(arrays["weight"][:n_events], cols.weight)
    assert not arrays["weight"][n_events:].any() and not arrays["Jet:counts"][n_events:].any()
    np.testing.assert_array_equal(arrays["Jet:pt"][:total], pt)
    np.testing.assert_array_equal(arrays["Jet:starts"][:n_events], np.cumsum(counts) - counts)


def test_padding_defaults() -> None:
    # the floors the compilation bound above was measured with
    assert Padding() == Padding(events=1024, objects=4096, max_count=16, events_indexed=64)


def test_more_padding_changes_nothing() -> None:
    plan = _plan("padding_invariance")
    cols = _random_chunk(np.random.default_rng(99))
    small = dataset_report(chunk_state(cols, plan, THETA, WIDTHS, backend="jax"), plan)
    d = Padding()
    more = Padding(events=8 * d.events, objects=8 * d.objects, max_count=4 * d.max_count,
                   events_indexed=8 * d.events_indexed)
    padded = pad_columns(cols, plan, padding=more)[1]
    assert padded.events == 8 * 1024 and padded.collections[0][1:] == (8 * 4096, 64)
    before = kernel._evaluate._cache_size()
    large = dataset_report(
        chunk_state(cols, plan, THETA, WIDTHS, backend=Backend("jax", padding=more)), plan)
    # the backend padded to the option's floors: a shape the default never makes, compiled
    assert kernel._evaluate._cache_size() == before + 1
    assert not differences(small, large, rtol=1e-12)
