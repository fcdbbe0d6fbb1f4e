"""The extension points: the registry of statistics, the objective-term classes and the
optimisers' one interface (optax ``GradientTransformationExtraArgs``). Fast: no data."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from analysis.config.loader import config_from_dict
from analysis.config.terms import (
    TERM_TYPES,
    PythonTerm,
    SignificanceTerm,
    TargetTerm,
    TermContext,
)
from analysis.errors import ConfigError
from analysis.optimize.objectives import Objective, stat_paths
from analysis.optimize.optimizers import make_optimizer, newton_trust_region
from analysis.pipeline import plan as plan_module
from analysis.pipeline.plan import build_plan
from analysis.spec import statistics as registry
from analysis.stats import _core

BASE = {
    "datasets": {"sig": {"files": ["x.root"], "role": "signal"}, "bkg": {"files": ["y.root"], "role": "background"}},
    "parameters": {"pt": {"init": 30.0, "bounds": [10.0, 100.0]}},
    "selection": {"objects": {"collection": "Jet", "cuts": [{"var": "pt", "op": ">", "param": "pt", "width": 5.0}]}},
    "observables": [
        {"name": "jet_pt", "x": "Jet.pt", "stats": ["mean", "std"]},
        {"name": "pt_eta", "x": "Jet.pt", "y": "Jet.eta", "stats": ["corr", "linear_fit"]},
    ],
}  # fmt: skip


def _config(**extra):
    return config_from_dict({**BASE, **extra})


# --- registry -------------------------------------------------------------------------


def test_config_plan_and_paths_come_from_the_registry(monkeypatch):
    # a statistic registered after import is a valid config choice (no copy of the names)
    extra = registry.Statistic("cv", 1, lambda s: s.m2, order=2)
    monkeypatch.setitem(registry.STATISTICS, "cv", extra)
    cfg = _config(observables=[{"name": "o", "x": "Jet.pt", "stats": ["cv"]}])
    assert build_plan(cfg).observables[0].univariate == ("cv",)
    monkeypatch.delitem(registry.STATISTICS, "cv")
    assert plan_module.UNIVARIATE_STATS == registry.UNIVARIATE
    assert plan_module.BIVARIATE_STATS == registry.BIVARIATE
    assert set(registry.UNIVARIATE) | set(registry.BIVARIATE) == set(registry.NAMES)
    cfg = _config()
    plan = build_plan(cfg)
    assert [o.statistics for o in plan.observables] == [("mean", "std"), ("corr", "linear_fit")]
    paths = stat_paths(cfg, plan)
    assert "sig.jet_pt.mean" in paths and "bkg.pt_eta.linear_fit.slope_error" in paths
    assert "sig.pt_eta.linear_fit" not in paths  # a dict-valued statistic: its fields only


def _numpy_statistics(x, y, w) -> dict:
    """Every shipped statistic from numpy (weighted, population), independent of the
    moment states: the reference a new statistic must be added to."""
    mean = np.average(x, weights=w)
    m = {k: np.average((x - mean) ** k, weights=w) for k in (2, 3, 4)}
    my = np.average(y, weights=w)
    cov = np.average((x - mean) * (y - my), weights=w)
    (slope, intercept), c = np.polyfit(x, y, 1, w=np.sqrt(w), cov="unscaled")
    return {
        "mean": mean, "var": m[2], "std": np.sqrt(m[2]), "skew": m[3] / m[2] ** 1.5,
        "kurtosis": m[4] / m[2] ** 2 - 3.0, "covar": cov,
        "corr": cov / np.sqrt(m[2] * np.average((y - my) ** 2, weights=w)),
        "linear_fit": {"intercept": intercept, "slope": slope,
                       "intercept_error": np.sqrt(c[1, 1]), "slope_error": np.sqrt(c[0, 0])},
    }  # fmt: skip


def test_every_registered_statistic_against_numpy():
    rng = np.random.default_rng(5)
    x, y, w = rng.normal(3, 2, 40), rng.normal(-1, 1, 40), rng.uniform(0.2, 2, 40)
    y = y + 0.5 * x
    states = {"moments": _core.moments(jnp.asarray(x), jnp.asarray(w)),
              "comoments": _core.comoments(jnp.asarray(x), jnp.asarray(y), jnp.asarray(w))}
    want = _numpy_statistics(x, y, w)
    assert set(want) == set(registry.names())  # a new statistic needs a reference here
    got = registry.observable_statistics(states, registry.names())
    assert list(got) == list(registry.names())
    for name, value in want.items():
        if isinstance(value, dict):
            assert set(got[name]) == set(registry.STATISTICS[name].fields)
            for k, v in value.items():
                assert float(got[name][k]) == pytest.approx(v, rel=1e-10), (name, k)
        else:
            assert float(got[name]) == pytest.approx(value, rel=1e-11), name
    assert registry.json_paths("mean") == ("mean",)
    assert registry.observable_statistics(states, ()) == {}


def test_unknown_statistic_lists_the_registry():
    with pytest.raises(ConfigError, match="observables.0.stats.0: expected one of 'mean'.*got 'meen'"):
        _config(observables=[{"name": "o", "x": "Jet.pt", "stats": ["meen"]}])


# --- objective terms ----------------------------------------------------------------


def test_terms_are_classes_of_a_discriminated_union():
    cfg = _config(objective={"terms": [
        {"type": "significance", "sigma_b": 0.1},
        {"type": "target", "stat": "sig.yield", "value": 1.0},
        {"type": "python", "function": "tests.userlosses:soft_ratio"},
    ]})  # fmt: skip
    kinds = [type(t) for t in cfg.objective.terms]
    assert kinds == [SignificanceTerm, TargetTerm, PythonTerm]
    assert TERM_TYPES == ("significance", "target", "python", "discovery_significance",
                          "mu_uncertainty", "cls_upper_limit")


def test_terms_see_the_objective_as_their_typed_context():
    cfg = _config(objective={"terms": [{"type": "significance"}]})
    ctx = Objective(cfg, build_plan(cfg))
    assert isinstance(ctx, TermContext)
    assert (ctx.signal, ctx.background, ctx.source) == (["sig"], ["bkg"], "<config>")
    assert "sig.jet_pt.mean" in ctx.paths


@pytest.mark.parametrize(
    ("term", "expect"),
    [
        ({"sigma_b": 0.1}, "objective.terms.0.type: missing required key"),
        ({"type": "signif"}, "objective.terms.0.type: expected one of 'significance', 'target', 'python', 'discovery_significance', 'mu_uncertainty', 'cls_upper_limit', got 'signif'"),
        ({"type": "target", "stat": "sig.yield", "value": 1.0, "sigma_b": 0.1},
         "objective.terms.0.sigma_b: unknown key"),
        ({"type": "significance", "sigma_b": -1}, "objective.terms.0.sigma_b: must be >= 0"),
        ({"type": "target", "value": 1.0}, "objective.terms.0.stat: a target term needs 'stat'"),
    ],
)  # fmt: skip
def test_term_errors_name_the_key(term, expect):
    with pytest.raises(ConfigError) as err:
        _config(objective={"terms": [term]})
    assert expect in str(err.value)
    assert "\n" not in str(err.value)


# --- optimisers -----------------------------------------------------------------------


def test_every_optimiser_takes_the_same_extra_arguments():
    for method, order in (("first_order", 1), ("newton", 2)):
        opt = make_optimizer(_config(optimizer={"method": method, "name": "sgd"}))
        assert opt.order == order
        assert isinstance(opt.transform, optax.GradientTransformationExtraArgs)
        u = jnp.array([0.5])
        state = opt.transform.init(u)
        updates, _ = opt.transform.update(
            jnp.array([1.0]), state, u, value=1.0, hessian=jnp.array([[2.0]])
        )
        assert float(updates[0]) < 0  # downhill


def _quadratic(u):
    """f(u) = (u - c)^T A (u - c) / 2 with its gradient and Hessian; minimum at c."""
    a = np.array([[3.0, 1.0], [1.0, 2.0]])
    c = np.array([0.3, 0.7])
    d = u - c
    return 0.5 * d @ a @ d, a @ d, a


def test_newton_trust_region_reaches_a_quadratic_minimum():
    tx = newton_trust_region(radius=0.1)
    u = np.array([0.9, 0.1])
    state = tx.init(u)
    radii = []
    for _ in range(20):
        f, g, h = _quadratic(u)
        updates, state = tx.update(g, state, u, value=f, hessian=h)
        u = np.clip(np.asarray(optax.apply_updates(jnp.asarray(u), updates)), 0.0, 1.0)
        radii.append(float(state.radius))
    np.testing.assert_allclose(u, [0.3, 0.7], atol=1e-8)
    assert max(radii) > 0.1  # steps at the radius that went as predicted widened it


def test_newton_rejects_a_step_that_went_uphill():
    tx = newton_trust_region(radius=0.2)
    u0 = np.array([0.9, 0.1])
    f, g, h = _quadratic(u0)
    updates, state = tx.update(g, tx.init(u0), u0, value=f, hessian=h)
    # Pretend the objective got worse at the new point: back to u0, radius / 4.
    u1 = u0 + np.asarray(updates)
    _, g1, h1 = _quadratic(u1)
    updates, state2 = tx.update(g1, state, u1, value=f + 1.0, hessian=h1)
    np.testing.assert_array_equal(state2.u, u0)
    assert float(state2.radius) == pytest.approx(0.05)
    assert np.linalg.norm(u1 + np.asarray(updates) - u0) <= 0.05 + 1e-12


def test_the_registry_has_one_name():
    # one registry under one module name: no alias module that a reader must first
    # recognise as the same dict (issue 51, "one of each")
    import importlib.util

    assert importlib.util.find_spec("analysis.stats.registry") is None
    assert registry.__name__ == "analysis.spec.statistics"
