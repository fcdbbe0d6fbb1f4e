"""segment_ids_from_offsets on traced offsets against numpy's repeat (exact integers)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from analysis.stats.jagged import segment_ids_from_offsets


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
