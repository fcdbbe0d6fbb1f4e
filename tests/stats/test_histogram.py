"""Soft histograms (analysis.stats.histogram) against hist fills, exact enumeration of
pass/fail configurations, finite differences, and across chunks and merges."""

from __future__ import annotations

import itertools
import pickle

import awkward as ak
import hist
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats
from analysis.stats import Jagged
from tests.conftest import central_difference

EDGES = [100.0, 200.0, 300.0, 450.0, 700.0]


def _hist(x, w):
    h = hist.Hist(hist.axis.Variable(EDGES), storage=hist.storage.Weight())
    h.fill(np.asarray(x, dtype=np.float64), weight=np.asarray(w, dtype=np.float64))
    return h.view(flow=True)


def _events(n=400, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 900.0, n)
    x[:8] = [100.0, 200.0, 700.0, 99.999, 450.0, np.nan, np.inf, -np.inf]  # edges, flow
    w = rng.integers(-8, 40, n) / 8.0  # dyadic: every sum is exact, in any order
    return x, w


def test_hard_cut_equals_hist_fill_exactly():
    x, w = _events()
    passed = (np.arange(x.size) % 3 != 0).astype(np.float64)
    h = stats.histogram(x, EDGES, weight=w, prob=passed)
    ref = _hist(x[passed == 1], w[passed == 1])
    np.testing.assert_array_equal(np.asarray(h.sumw_flow), ref.value)
    np.testing.assert_array_equal(np.asarray(h.sumw2_flow), ref.variance)
    np.testing.assert_array_equal(np.asarray(h.sumw), ref.value[1:-1])
    np.testing.assert_array_equal(h.edges, EDGES)
    flow = h.flow
    assert (float(flow.underflow_sumw), float(flow.overflow_sumw2)) == (
        ref.value[0],
        ref.variance[-1],
    )


def test_per_object_hard_cut_equals_hist_fill():
    """Jagged x with one weight per event (awkward broadcasting), a hard per-object cut."""
    rng = np.random.default_rng(2)
    counts = rng.integers(0, 5, 60)
    pt = ak.unflatten(rng.uniform(50.0, 800.0, counts.sum()), counts)
    w = rng.integers(1, 20, 60) / 4.0
    passed = ak.values_astype(pt > 150.0, np.float64)
    h = stats.histogram(pt, EDGES, weight=w, prob=passed)
    wflat = ak.flatten(ak.broadcast_arrays(w, pt)[0])
    keep = ak.to_numpy(ak.flatten(pt > 150.0))
    ref = _hist(ak.to_numpy(ak.flatten(pt))[keep], ak.to_numpy(wflat)[keep])
    np.testing.assert_array_equal(np.asarray(h.sumw_flow), ref.value)
    np.testing.assert_array_equal(np.asarray(h.sumw2_flow), ref.variance)


def _enumerate(x, w, p):
    """E[hard-cut sumw, sumw2] over all 2^n pass/fail configurations of independent entries."""
    sumw = np.zeros(len(EDGES) + 1)
    sumw2 = np.zeros(len(EDGES) + 1)
    for config in itertools.product((0, 1), repeat=len(x)):
        c = np.asarray(config, dtype=bool)
        prob = np.prod(np.where(c, p, 1.0 - p))
        v = _hist(x[c], w[c])
        sumw += prob * v.value
        sumw2 += prob * v.variance
    return sumw, sumw2


def test_soft_histogram_equals_exact_enumeration():
    rng = np.random.default_rng(3)
    x = np.array([50.0, 150.0, 160.0, 320.0, 500.0, 650.0, 720.0, 250.0, 190.0])
    w = rng.uniform(0.3, 2.5, x.size)
    p = rng.uniform(0.05, 0.95, x.size)
    h = stats.histogram(x, EDGES, weight=w, prob=p)
    sumw, sumw2 = _enumerate(x, w, p)
    np.testing.assert_allclose(np.asarray(h.sumw_flow), sumw, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(h.sumw2_flow), sumw2, rtol=1e-12, atol=1e-14)
    # sum (w p)^2 (the variance of a histogram filled with weights w p) is not it
    naive = stats.histogram(x, EDGES, weight=w * p)
    assert not np.allclose(np.asarray(naive.sumw2_flow), sumw2)


def test_per_object_soft_histogram_equals_enumeration():
    """Objects of a Jagged, each passing independently; a per-event weight per object."""
    counts = np.array([3, 0, 2, 4])
    rng = np.random.default_rng(4)
    pt = rng.uniform(80.0, 760.0, counts.sum())
    pt = Jagged(jnp.asarray(pt), jnp.asarray(np.r_[0, np.cumsum(counts)]))
    w_event = np.array([1.5, 2.0, 0.5, 1.25])
    p = rng.uniform(0.1, 0.9, counts.sum())
    w = pt.expand(jnp.asarray(w_event))
    h = stats.histogram(pt, EDGES, weight=w, prob=p)
    sumw, sumw2 = _enumerate(np.asarray(pt.values), np.repeat(w_event, counts), p)
    np.testing.assert_allclose(np.asarray(h.sumw_flow), sumw, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(h.sumw2_flow), sumw2, rtol=1e-12, atol=1e-14)


def _chunk_fn(x, w):
    def fn(theta):
        p = jax.nn.sigmoid((jnp.asarray(x) - theta["cut"]) / theta["width"])
        return {"ht": stats.histogram(x, EDGES, weight=w, prob=p), "n": jnp.sum(w * p)}

    return fn


THETA = {"cut": 260.0, "width": 40.0}


def test_chunks_merge_exactly():
    x, w = _events(n=600)
    x = np.nan_to_num(x, posinf=1e4, neginf=-1e4)
    whole = stats.derive(_chunk_fn(x, w), THETA, order=2)
    pieces = [
        stats.derive(_chunk_fn(x[i:j], w[i:j]), THETA, order=2)
        for i, j in ((0, 7), (7, 300), (300, 600))
    ]
    for merged in (sum(pieces), pieces[2] + (pieces[1] + pieces[0])):
        for part in ("value", "jac", "hess"):
            a = jax.tree_util.tree_leaves(getattr(merged, part))
            b = jax.tree_util.tree_leaves(getattr(whole, part))
            for u, v in zip(a, b, strict=True):
                np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-10 * np.abs(v).max())
    direct = stats.merge(pieces[0].value, pieces[1].value)
    assert isinstance(direct["ht"], stats.Histogram)
    assert pickle.loads(pickle.dumps(whole)).value["ht"].edges.tolist() == EDGES


def test_jacobian_equals_finite_differences():
    x, w = _events(n=300)
    x = np.nan_to_num(x, posinf=1e4, neginf=-1e4)
    fn = _chunk_fn(x, w)
    d = stats.derive(fn, THETA)
    names = sorted(THETA)

    def values(t):
        out = fn(dict(zip(names, t, strict=True)))["ht"]
        return np.concatenate([np.asarray(out.sumw_flow), np.asarray(out.sumw2_flow)])

    fd = central_difference(values, [THETA[n] for n in names], [1e-3, 1e-3], points=5)
    jac = np.concatenate([d.jac["ht"].sumw_flow, d.jac["ht"].sumw2_flow])
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-9)
    assert np.abs(jac).max() > 0.1  # the cut moves the bins


def test_under_jit_and_to_hist():
    x, w = _events(n=50)
    h = jax.jit(lambda p: stats.histogram(x, EDGES, weight=w, prob=p))(jnp.full(50, 0.5))
    eager = stats.histogram(x, EDGES, weight=w, prob=np.full(50, 0.5))
    np.testing.assert_array_equal(np.asarray(h.sumw_flow), np.asarray(eager.sumw_flow))
    hh = h.to_hist()
    assert isinstance(hh, hist.Hist)
    np.testing.assert_array_equal(hh.view(flow=True).value, np.asarray(h.sumw_flow))
    np.testing.assert_array_equal(hh.view(flow=True).variance, np.asarray(h.sumw2_flow))
    empty = stats.histogram(np.zeros(0), EDGES)
    np.testing.assert_array_equal(np.asarray(empty.sumw_flow), np.zeros(len(EDGES) + 1))


@pytest.mark.parametrize(
    ("edges", "match"),
    [
        ([1.0, 3.0, 3.0], r"strictly increasing edges, found edges\[2\] = 3 after edges\[1\] = 3"),
        ([5.0, 2.0], r"strictly increasing edges, found edges\[1\] = 2 after edges\[0\] = 5"),
        ([1.0, np.nan], r"edges\[1\] = nan: expected finite numbers"),
        ([1.0], "at least two bin edges"),
        ("abc", "expected a list of numbers"),
    ],
)
def test_bad_edges_one_line(edges, match):
    with pytest.raises(ValueError, match=match) as err:
        stats.histogram(np.ones(3), edges)
    assert "\n" not in str(err.value)


def test_merge_refuses_different_edges():
    a = stats.derive(
        lambda t: {"h": stats.histogram(np.ones(2), [0.0, 1.0, 2.0], prob=t["c"] * np.ones(2))},
        {"c": 1.0},
    )
    b = stats.derive(
        lambda t: {"h": stats.histogram(np.ones(2), [0.0, 1.5, 2.0], prob=t["c"] * np.ones(2))},
        {"c": 1.0},
    )
    with pytest.raises(
        ValueError, match=r"at \['h'\]: histogram edges \[0.0, 1.0, 2.0\] vs \[0.0, 1.5, 2.0\]"
    ):
        a + b
    with pytest.raises(ValueError, match="histogram edges"):
        stats.merge(a.value, b.value)


def test_hessian_equals_finite_differences_of_the_jacobian():
    x, w = _events(n=200, seed=5)
    x = np.nan_to_num(x, posinf=1e4, neginf=-1e4)
    fn = _chunk_fn(x, w)
    names = sorted(THETA)
    d = stats.derive(fn, THETA, order=2)

    def jac(t):
        j = stats.derive(fn, dict(zip(names, t, strict=True))).jac["ht"]
        return np.concatenate([j.sumw_flow, j.sumw2_flow])

    fd = central_difference(jac, [THETA[n] for n in names], [1e-2, 1e-2], points=5)
    hess = np.concatenate([d.hess["ht"].sumw_flow, d.hess["ht"].sumw2_flow])
    np.testing.assert_allclose(hess, fd, rtol=1e-6, atol=1e-10 * np.abs(fd).max())
    assert np.abs(hess).max() > 1e-4


def test_testing_helpers_see_histogram_bins():
    """analysis.testing reads a Histogram's bins (its pytree keys are attributes)."""
    from analysis.testing import statistics_of

    x = np.array([0.5, 1.5, 1.7, 3.9, 5.0])
    w = np.array([1.0, 2.0, 0.5, 1.5, 3.0])
    h = stats.histogram(jnp.asarray(x), [0.0, 2.0, 4.0], weight=jnp.asarray(w))
    got = {k: float(g({"h": h})) for k, g in statistics_of({"h": h}).items()}
    want, _ = np.histogram(x, bins=[0.0, 2.0, 4.0], weights=w)
    assert [got[f"['h'].sumw_flow[{i}]"] for i in (1, 2)] == pytest.approx(want, rel=1e-15)
    assert got["['h'].sumw_flow[3]"] == pytest.approx(3.0)  # 5.0 is overflow
