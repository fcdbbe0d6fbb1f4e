"""The enumeration oracle itself, on cases small enough to write out by hand."""

from __future__ import annotations

import numpy as np

from tests.reference import configurations, flatten, members, ranked


def test_configurations_of_two_bits():
    conf, prob = configurations([0.9, 0.25])
    np.testing.assert_array_equal(conf, [[0, 0], [0, 1], [1, 0], [1, 1]])
    np.testing.assert_allclose(prob, [0.1 * 0.75, 0.1 * 0.25, 0.9 * 0.75, 0.9 * 0.25])
    conf, prob = configurations([])
    assert conf.shape == (1, 0) and prob.tolist() == [1.0]


def test_members_respect_parents():
    member, prob = members({"jets": [0.5, 0.8], "bjets": [0.5, 0.5]}, {"bjets": "jets"})
    assert len(prob) == 16 and abs(prob.sum() - 1) < 1e-15
    assert not np.any(member["bjets"] & ~member["jets"])  # a b-jet is a jet
    np.testing.assert_allclose(prob @ member["jets"], [0.5, 0.8])
    np.testing.assert_allclose(prob @ member["bjets"], [0.25, 0.4])


def test_ranked_orders_by_rank_with_stable_ties():
    member = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 0]], dtype=bool)
    np.testing.assert_array_equal(ranked(member, [10.0, 30.0, 30.0], 0), [1, 1, -1])
    np.testing.assert_array_equal(ranked(member, [10.0, 30.0, 30.0], 1), [2, 2, -1])
    np.testing.assert_array_equal(ranked(member, [10.0, 30.0, 30.0], 2), [0, -1, -1])


def test_flatten_named_tuples_and_dicts():
    from analysis.stats._core import Moments

    m = Moments(1.0, 2.0, 0.0, 3.0, 4.0, 5.0)
    assert dict(flatten({"a": {"moments": m}, "b": None})) == {
        "a/moments/sumw": 1.0, "a/moments/center": 2.0, "a/moments/dmean": 0.0,
        "a/moments/m2": 3.0, "a/moments/m3": 4.0, "a/moments/m4": 5.0, "b": None,
    }  # fmt: skip
