"""Trainable edges' coordinates (issue 50, item 2; analysis.optimize.edgecoords): the
edges ``NAME.edges[i]`` are parameters, the optimiser moves logits of the bin widths, so
any update keeps them strictly increasing inside the fixed outer edges; the chain rule
to the logits (gradient and Hessian) against central differences."""

from __future__ import annotations

import numpy as np
import optax
import pytest

from analysis.config.loader import config_from_dict
from analysis.errors import ConfigError
from analysis.optimize.edgecoords import EdgeCoordinates, with_edges
from analysis.optimize.loop import Coordinates
from tests.conftest import central_difference
from tests.pipeline.test_histograms import _cfg


def _config(**hist):
    cfg = _cfg()
    cfg["histograms"][0].update(hist)  # ht: edges [0, 50, 100, 200, 400]
    return config_from_dict(cfg)


def test_edges_are_named_parameters_after_the_others():
    config = _config(trainable_edges=True)
    names = ["ht.edges[1]", "ht.edges[2]", "ht.edges[3]"]
    assert config.trainable_names()[-3:] == names
    init = config.initial_params()
    assert [init[n] for n in names] == [50.0, 100.0, 200.0]
    assert config.bounds_of("ht.edges[2]") is None
    assert config.histograms[0].edges_at({"ht.edges[2]": 120.0}) == (0.0, 50.0, 120.0, 200.0,
                                                                      400.0)
    with pytest.raises(ConfigError, match="trainable_edges"):
        cfg = _cfg()
        cfg["histograms"][0].update(trainable_edges=True, edges=[0.0, 400.0])
        config_from_dict(cfg)


def _coords():
    config = _config(trainable_edges=True)
    names = tuple(config.trainable_names())
    coords = with_edges(Coordinates(config, names), config)
    assert isinstance(coords, EdgeCoordinates)
    return coords, names


def test_round_trip_and_order_under_any_update():
    coords, names = _coords()
    theta = np.array([20.0, 30.0, 1.2, 60.0, 90.0, 250.0])  # lep_pt, jet_pt, n_lep, edges
    u = coords.to_u(theta)
    np.testing.assert_allclose(coords.to_theta(u), theta, rtol=1e-13)
    assert np.all((u[:3] >= 0) & (u[:3] <= 1))  # the cuts keep their unit coordinates
    rng = np.random.default_rng(5)
    for _ in range(50):  # wild logits: still strictly inside (0, 400), increasing
        v = u + rng.normal(0.0, 8.0, u.size)
        e = coords.to_theta(coords.clip(v))[3:]
        assert np.all(np.diff(np.r_[0.0, e, 400.0]) > 0), e


def test_chain_rule_to_the_logits_equals_finite_differences():
    coords, _ = _coords()
    rng = np.random.default_rng(2)
    a = rng.normal(size=6)
    m = rng.normal(size=(6, 6))
    hess = m @ m.T

    def objective(theta):  # a quadratic in the parameters
        return float(a @ theta + 0.5 * theta @ hess @ theta / 1e4)

    u = coords.to_u(np.array([20.0, 30.0, 1.2, 60.0, 90.0, 250.0]))
    theta = coords.to_theta(u)
    g = a + hess @ theta / 1e4
    g_u, h_u = coords.chain(u, g, hess / 1e4)
    fd = central_difference(lambda v: objective(coords.to_theta(v)), u, 1e-5)
    np.testing.assert_allclose(g_u, fd, rtol=1e-6, atol=1e-8)
    fd2 = central_difference(lambda v: coords.chain(v, a + hess @ coords.to_theta(v) / 1e4)[0],
                             u, 1e-5)
    np.testing.assert_allclose(h_u, fd2, rtol=1e-5, atol=1e-7)


def test_adam_steps_keep_edges_ordered():
    """An optax step on the logits with a huge gradient pushing edge 2 past edge 3."""
    coords, _ = _coords()
    u = coords.to_u(np.array([20.0, 30.0, 1.2, 60.0, 90.0, 250.0]))
    opt = optax.sgd(10.0)
    state = opt.init(u)
    for _ in range(5):
        g_u, _ = coords.chain(u, np.array([0, 0, 0, 0, -1e3, 0.0]))
        upd, state = opt.update(g_u, state, u)
        u = coords.clip(optax.apply_updates(u, upd))
        e = coords.to_theta(u)[3:]
        assert np.all(np.diff(np.r_[0.0, e, 400.0]) > 0), e
    assert e[1] > 200.0  # it moved toward the upper edges, never across them
