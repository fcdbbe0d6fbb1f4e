"""Cut kinds (analysis.select.cuts): the registry, the window cut's probability and
its YAML keys. Fast: no data (the window through the pipeline on the DY file:
tests/pipeline/test_cut_window.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pydantic
import pytest

import analysis  # noqa: F401  (float64)
from analysis.config import loader
from analysis.config.loader import config_from_dict
from analysis.errors import ConfigError
from analysis.pipeline.plan import build_plan
from analysis.select import cuts
from tests.conftest import central_difference, edited


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


# --- the registry ---------------------------------------------------------------------


def test_every_op_names_one_kind_and_the_config_takes_every_op():
    assert len(cuts.OPS) == len(set(cuts.OPS))
    for op in cuts.OPS:
        assert op in cuts.kind_of(op).ops
    op_type = pydantic.TypeAdapter(loader.Op)
    assert [op_type.validate_python(op) for op in cuts.OPS] == list(cuts.OPS)
    with pytest.raises(pydantic.ValidationError, match="expected one of '>', .*, got 'between'"):
        op_type.validate_python("between")
    with pytest.raises(KeyError, match="unknown cut op 'between'"):
        cuts.kind_of("between")


# --- the window -----------------------------------------------------------------------

X = np.array([-3.0, 9.9, 10.0, 10.1, 15.0, 19.9, 20.0, 20.1, 40.0])


@pytest.mark.parametrize("width", [0.5, 2.0])
def test_window_is_the_product_of_two_sigmoids(width):
    got = np.asarray(cuts.probability("window", jnp.asarray(X), [10.0, 20.0], width))
    want = sigmoid((X - 10.0) / width) * sigmoid((20.0 - X) / width)
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_window_at_width_zero_is_the_hard_open_interval():
    got = np.asarray(cuts.probability("window", jnp.asarray(X), [10.0, 20.0], 0.0))
    np.testing.assert_array_equal(got, ((X > 10.0) & (X < 20.0)).astype(float))
    g = jax.grad(lambda b: jnp.sum(cuts.probability("window", jnp.asarray(X), b, 0.0)))(
        jnp.array([10.0, 20.0]))
    np.testing.assert_array_equal(np.asarray(g), 0.0)  # hard: zero, finite gradient


def fd_checked_jacobian(op: str, b0) -> np.ndarray:
    """``d P / d bounds`` of kind ``op`` at ``X`` (width 1.5), checked against central
    differences."""
    x = jnp.asarray(X)

    def f(b):
        return np.asarray(cuts.probability(op, x, jnp.asarray(b), 1.5))

    b0 = np.asarray(b0, dtype=np.float64)
    jac = np.asarray(jax.jacfwd(lambda b: cuts.probability(op, x, b, 1.5))(jnp.asarray(b0)))
    np.testing.assert_allclose(jac, central_difference(f, b0, 1e-6), rtol=1e-7, atol=1e-10)
    return jac


def test_window_gradient_in_both_thresholds_matches_central_differences():
    jac = fd_checked_jacobian("window", [11.0, 19.0])
    assert np.all(jac[:, 0] <= 0) and np.all(jac[:, 1] >= 0)  # a wider window passes more


# --- the window about a centre (derived edges) ------------------------------------------


@pytest.mark.parametrize("width", [0.0, 0.5, 2.0])
def test_around_is_the_window_at_its_derived_edges(width):
    x = jnp.asarray(X)
    got = np.asarray(cuts.probability("around", x, [15.0, 5.0], width))
    want = (sigmoid((X - 10.0) / width) * sigmoid((20.0 - X) / width) if width
            else ((X > 10.0) & (X < 20.0)).astype(float))
    np.testing.assert_allclose(got, want, rtol=1e-14)
    assert cuts.edges_of(cuts.kind_of("around"), "around", (15.0, 5.0)) == (10.0, 20.0)


def test_around_gradient_in_centre_and_half_width_matches_central_differences():
    jac = fd_checked_jacobian("around", [15.0, 4.0])
    assert np.all(jac[:, 1] >= 0)  # a wider window passes more
    # the chain rule by hand: d/dc = d/dlo + d/dhi, d/dd = d/dhi - d/dlo
    win = fd_checked_jacobian("window", [11.0, 19.0])
    np.testing.assert_allclose(jac, np.stack([win[:, 0] + win[:, 1], win[:, 1] - win[:, 0]], 1),
                               rtol=1e-14, atol=1e-16)


def test_around_keys_and_check():
    cfg = edited(edited(BASE, "selection/1", {"var": "MET.pt", "op": "around", "center": 50.0,
                                              "half_param": "hi", "width": 2.0}),
                 "parameters/hi", {"init": 20.0, "bounds": [5.0, 40.0]})
    (ec,) = build_plan(config_from_dict(cfg)).event_cuts
    assert (ec.kind_op, ec.bounds) == ("around", ((None, 50.0), (1, None)))
    bad = edited(BASE, "selection/1", {"var": "MET.pt", "op": "around", "center": 5.0,
                                       "half": 0.0})
    with pytest.raises(ConfigError, match=r"selection\.1\.half: around needs half > 0, got half 0"):
        config_from_dict(bad)


# --- YAML keys --------------------------------------------------------------------------

BASE = {
    "datasets": {"d": {"files": ["x.root"]}},
    "parameters": {"lo": {"init": 20.0, "bounds": [0.0, 50.0]},
                   "hi": {"init": 80.0, "bounds": [60.0, 200.0]}},
    "objects": {"jets": {"collection": "Jet", "cuts": [
        {"var": "pt", "op": "window", "lo_param": "lo", "hi": 200.0, "width": 5.0}]}},
    "selection": [{"count": "jets", "op": ">=", "value": 1},
                  {"var": "MET.pt", "op": "window", "lo": 10.0, "hi_param": "hi", "width": 2.0}],
    "observables": [{"name": "met", "x": "MET.pt", "stats": ["mean"]}],
}  # fmt: skip


def test_window_keys_reach_the_plan():
    cfg = config_from_dict(BASE)
    assert cfg.objects["jets"].cuts[0].thresholds() == (("lo", None), (None, 200.0))
    plan = build_plan(cfg)
    (oc,) = plan.sets.sets[0].cuts
    assert (oc.kind_op, oc.bounds, oc.field) == ("window", ((0, None), (None, 200.0)), "pt")
    (ec,) = plan.event_cuts
    assert (ec.kind_op, ec.bounds, ec.key) == ("window", ((None, 10.0), (1, None)), "MET.pt")
    assert plan.n_widths == 2


@pytest.mark.parametrize(
    ("path", "value", "expect"),
    [
        ("selection/1", {"var": "MET.pt", "op": "window", "lo": 30.0, "hi": 20.0},
         "selection.1.hi: window needs lo < hi, got lo 30 and hi 20"),
        ("selection/1", {"var": "MET.pt", "op": "window", "lo": 30.0, "value": 50.0},
         "selection.1.value: a 'window' cut takes 'lo' or 'lo_param' and 'hi' or 'hi_param'"),
        ("selection/1", {"var": "MET.pt", "op": "window", "lo": 30.0},
         "selection.1: needs one of 'hi' or 'hi_param'"),
        ("selection/1", {"var": "MET.pt", "op": "window", "lo": 3.0, "hi": 9.0, "hi_param": "hi"},
         "selection.1.hi_param: give either 'hi' or 'hi_param', not both"),
        ("selection/1", {"var": "MET.pt", "op": "window", "lo": "x", "hi": 9.0},
         "selection.1.lo: expected a finite number, got 'x'"),
        ("selection/1", {"var": "MET.pt", "op": ">", "lo": 3.0},
         "selection.1.lo: unknown key"),
        ("selection/0", {"count": "jets", "op": "window", "lo": 1, "hi": 3},
         "selection.0.op: a count takes one of >, >=, <, <=, ==, got 'window'"),
        ("objects/jets/cuts/0/lo_param", "low",
         "objects.jets.cuts.0.lo_param: unknown parameter 'low'"),
        ("objects/jets/cuts/0/op", "between",
         "objects.jets.cuts.0.op: expected one of"),
    ],
)  # fmt: skip
def test_window_errors_name_the_key(path, value, expect):
    with pytest.raises(ConfigError) as err:
        config_from_dict(edited(BASE, path, value))
    assert expect in str(err.value)
    assert "\n" not in str(err.value)


def test_a_window_works_in_the_single_collection_form():
    """The single form is sugar for one object set: its window is the set's window."""
    cfg = config_from_dict({
        "datasets": {"d": {"files": ["x.root"]}},
        "selection": {"objects": {"collection": "Jet", "cuts": [
            {"var": "pt", "op": "window", "lo": 20.0, "hi": 80.0}]}},
        "observables": [{"name": "pt", "x": "Jet.pt", "stats": ["mean"]}],
    })  # fmt: skip
    (oc,) = build_plan(cfg).sets.sets[0].cuts
    assert (oc.kind_op, oc.bounds, oc.field) == ("window", ((None, 20.0), (None, 80.0)), "pt")


# --- analysis.soft.soft_cut reads the same kinds ----------------------------------------


def test_soft_cut_takes_every_kind_of_the_registry():
    from analysis.soft import soft_cut

    x = jnp.asarray(X)
    for width in (0.0, 2.0):
        for op in (">", ">=", "<", "<="):
            got = np.asarray(soft_cut(x, op, 10.0, width))
            want = np.asarray(cuts.probability(op, x, [10.0], width))
            np.testing.assert_array_equal(got, want)
        got = np.asarray(soft_cut(x, "window", (10.0, 20.0), width))
        want = (sigmoid((X - 10.0) / width) * sigmoid((20.0 - X) / width) if width
                else ((X > 10.0) & (X < 20.0)).astype(float))
        np.testing.assert_allclose(got, want, rtol=1e-14)
        got = np.asarray(soft_cut(x, "around", (15.0, 5.0), width))  # edges 10 and 20
        np.testing.assert_allclose(got, want, rtol=1e-14)
    with pytest.raises(ValueError, match=r"op 'window' expected 2 values \(lo, hi\), found 1"):
        soft_cut(x, "window", 10.0, 1.0)


def test_a_kind_registered_once_reaches_soft_cut(monkeypatch):
    from analysis.soft import soft_cut

    class Above:  # x > 2 t: a kind only the registry knows
        ops = ("above_twice",)
        bounds = ("",)

        def probability(self, x, bounds, width, *, op):
            return cuts.kind_of(">").probability(x, [2.0 * bounds[0]], width, op=">")

        def check(self, op, values):
            return None

    monkeypatch.setattr(cuts, "KINDS", (*cuts.KINDS, Above()))
    monkeypatch.setattr(cuts, "OPS", (*cuts.OPS, "above_twice"))
    got = np.asarray(soft_cut(jnp.asarray(X), "above_twice", 5.0, 0.0))
    np.testing.assert_array_equal(got, (X > 10.0).astype(float))
