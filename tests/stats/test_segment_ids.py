"""segment_ids_from_offsets on traced offsets against numpy's repeat (exact integers)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from analysis.stats.offsets import segment_ids_from_offsets


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("padding", [0, 1, 37])
def test_traced_equals_repeat(seed, padding):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 6, size=int(rng.integers(1, 3000)))
    counts[: rng.integers(0, 3)] = 0  # leading empty lists
    counts[len(counts) - int(rng.integers(0, 3)):] = 0  # trailing empty lists
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    n = int(offsets[-1]) + padding
    # elements beyond offsets[-1] (padding) belong to no list: index num_lists
    expected = np.concatenate([np.repeat(np.arange(len(counts), dtype=np.int32), counts),
                               np.full(padding, len(counts), np.int32)])
    got = jax.jit(lambda o: segment_ids_from_offsets(o, n))(offsets)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), expected)
    np.testing.assert_array_equal(segment_ids_from_offsets(offsets, n)[: offsets[-1]],
                                  expected[: offsets[-1]])


def test_no_elements():
    got = jax.jit(lambda o: segment_ids_from_offsets(o, 0))(np.zeros(4, np.int32))
    assert got.shape == (0,)


def test_a_compiled_chunk_reads_its_segment_ids_from_the_host() -> None:
    """stats.derive's compiled path passes a Jagged's list indices as an argument
    (analysis.stats._closure): equal to the traced prefix sum (padding: num_lists), and
    read in place of it while tracing."""
    from analysis.stats.offsets import forget_bounds, know_segment_ids, padded_segment_ids

    offsets = np.array([0, 2, 2, 5, 6, 6], dtype=np.int32)
    size = 9
    ids = padded_segment_ids(offsets, size)
    np.testing.assert_array_equal(
        ids, jax.jit(lambda o: segment_ids_from_offsets(o, size))(offsets))
    np.testing.assert_array_equal(ids, [0, 0, 2, 2, 2, 3, 5, 5, 5])

    def probe(o, i):  # noqa: ANN001, ANN202
        know_segment_ids(o, i)
        try:
            got = segment_ids_from_offsets(o, size)
            assert got is i
            assert segment_ids_from_offsets(o, size + 1) is not i  # another length
            return got
        finally:
            forget_bounds()

    np.testing.assert_array_equal(jax.jit(probe)(offsets, ids), ids)
