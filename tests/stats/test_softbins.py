"""Soft bins of ``stats.histogram(..., width=W)`` (issue 50, item 1).

- ``width=0`` (the default, or 0 traced inside ``jit``) is the hard histogram: a
  ``hist`` fill of an awkward hard selection, 1e-12;
- ``width > 0``: the issue's formula in numpy (:func:`tests.reference.soft_bins`) summed
  over the pass/fail configurations of the soft selection before it (the enumeration
  oracle), event-level and object-level entries, 1e-10;
- derivatives in ``x`` (a shifted observable), in a soft cut before it and in the
  width against central differences; bad widths refused in one line.
"""

from __future__ import annotations

import awkward as ak
import hist
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats
from tests.conftest import central_difference
from tests.reference import configurations, soft_bins

EDGES = [100.0, 200.0, 300.0, 450.0, 700.0]


def _oracle(x, w, p, width):
    """``(sumw, sumw2)`` by enumeration of the entries' pass bits (each configuration's
    passing entries spread over the bins by the issue's formula)."""
    conf, prob = configurations(p)
    q = soft_bins(EDGES, x, width)  # (N, nb)
    sumw = sum(pr * ((c * w) @ q) for c, pr in zip(conf, prob))
    sumw2 = sum(pr * ((c * w * w) @ q) for c, pr in zip(conf, prob))
    return sumw, sumw2


def test_width_zero_is_the_hist_fill_of_a_hard_selection():
    events = ak.Array({"x": [[150.0, 320.0, 99.0], [], [700.0, 450.0], [710.0, 200.0, 10.0]],
                       "w": [1.5, 2.0, 0.5, 1.25]})
    passed = events.x > 120.0
    x, w = events.x[passed], ak.broadcast_arrays(events.w, events.x)[0][passed]
    h = hist.Hist(hist.axis.Variable(EDGES), storage=hist.storage.Weight())
    h.fill(ak.to_numpy(ak.flatten(x)), weight=ak.to_numpy(ak.flatten(w)))
    view = h.view(flow=True)
    prob = ak.values_astype(passed, np.float64)
    wb = ak.broadcast_arrays(events.w, events.x)[0]
    for got in (stats.histogram(events.x, EDGES, weight=wb, prob=prob, width=0.0),
                jax.jit(lambda wd: stats.histogram(
                    jnp.asarray(ak.to_numpy(ak.flatten(events.x))), EDGES,
                    weight=jnp.asarray(ak.to_numpy(ak.flatten(wb))),
                    prob=jnp.asarray(ak.to_numpy(ak.flatten(prob))), width=wd))(0.0)):
        np.testing.assert_allclose(np.asarray(got.sumw_flow), view.value, rtol=1e-12, atol=0)
        np.testing.assert_allclose(np.asarray(got.sumw2_flow), view.variance, rtol=1e-12,
                                   atol=0)


@pytest.mark.parametrize("width", [5.0, 40.0, 300.0])
def test_event_level_soft_bins_equal_enumeration(width):
    rng = np.random.default_rng(7)
    x = np.array([50.0, 150.0, 199.0, 320.0, 500.0, 650.0, 720.0, 250.0, 100.0])
    w = rng.uniform(0.3, 2.5, x.size)
    p = rng.uniform(0.05, 0.95, x.size)
    h = stats.histogram(x, EDGES, weight=w, prob=p, width=width)
    sumw, sumw2 = _oracle(x, w, p, width)
    np.testing.assert_allclose(np.asarray(h.sumw_flow), sumw, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.asarray(h.sumw2_flow), sumw2, rtol=1e-10, atol=1e-14)
    # the total is that of the hard histogram: soft bins move weight, never lose it
    hard = stats.histogram(x, EDGES, weight=w, prob=p)
    np.testing.assert_allclose(float(jnp.sum(h.sumw_flow)), float(jnp.sum(hard.sumw_flow)),
                               rtol=1e-13)


def test_object_level_soft_bins_equal_enumeration():
    """Objects of an awkward Array, each passing a soft cut independently; per-event
    weights broadcast to the objects."""
    pt = ak.Array([[150.0, 320.0, 99.0], [], [700.0, 450.0], [710.0, 200.0, 10.0]])
    w_event = ak.Array([1.5, 2.0, 0.5, 1.25])
    p = 1.0 / (1.0 + np.exp(-(pt - 180.0) / 30.0))  # a soft cut pt > 180
    h = stats.histogram(pt, EDGES, weight=w_event, prob=p, width=25.0)
    flat = ak.to_numpy(ak.flatten(pt))
    w = ak.to_numpy(ak.flatten(ak.broadcast_arrays(w_event, pt)[0]))
    sumw, sumw2 = _oracle(flat, w, ak.to_numpy(ak.flatten(p)), 25.0)
    np.testing.assert_allclose(np.asarray(h.sumw_flow), sumw, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.asarray(h.sumw2_flow), sumw2, rtol=1e-10, atol=1e-14)


def test_derivatives_in_x_cut_and_width_equal_finite_differences():
    rng = np.random.default_rng(11)
    x = rng.uniform(50.0, 800.0, 60)
    w = rng.uniform(0.5, 2.0, 60)

    def bins(theta):  # x shifted by theta[0], a soft cut at theta[1], width theta[2]
        xs = jnp.asarray(x) + theta[0]
        p = jax.nn.sigmoid((xs - theta[1]) / 20.0)
        return stats.histogram(xs, EDGES, weight=w, prob=p, width=theta[2]).sumw_flow

    theta0 = jnp.array([7.0, 260.0, 30.0])
    jac = np.asarray(jax.jacfwd(bins)(theta0))
    np.testing.assert_allclose(jax.jacrev(bins)(theta0), jac, rtol=1e-12, atol=1e-12)
    fd = np.asarray(central_difference(lambda t: np.asarray(bins(jnp.asarray(t))),
                                       np.asarray(theta0), 1e-4))
    np.testing.assert_allclose(jac, fd.reshape(jac.shape), rtol=1e-6, atol=1e-8)
    assert np.abs(jac[:, 0]).max() > 0.01  # x moves entries between bins
    # hard bins: x has no derivative (only the cut)
    hard = jax.jacfwd(lambda t: stats.histogram(
        jnp.asarray(x) + t[0], EDGES, weight=w).sumw_flow)(theta0)
    assert np.all(np.asarray(hard) == 0)


@pytest.mark.parametrize("width", [-1.0, float("nan"), float("inf"), [1.0, 2.0]])
def test_bad_width_one_line(width):
    with pytest.raises(ValueError, match="stats.histogram: width") as err:
        stats.histogram(np.array([1.0]), EDGES, width=width)
    assert "\n" not in str(err.value)
