"""Objectives: exact gradients and Hessians through the whole pipeline, and Z_A itself.

The pipeline is Evaluator pass (coffea, chunks, JAX kernel) -> merged states ->
objective. Its gradient (order 1) and Hessian (order 2) must equal central finite
differences of the same pipeline re-run at shifted parameters, for every kind of
objective term. Widths are soft, so the objective is smooth; ``min_jets`` sits
between integers, where the soft ">= N" count is linear in N.
"""

from __future__ import annotations

from decimal import Decimal, getcontext

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis.driver.runner import Evaluator
from analysis.optimize.objectives import (
    Objective,
    asimov_significance,
    dataset_norm,
    objective_from_states,
)
from analysis.pipeline.results import dataset_report
from tests import opt_helpers as H
from tests.conftest import central_difference

# Where derivatives are checked: away from bounds, min_jets between integers.
CENTER = {"jet_pt_min": 40.0, "jet_abs_eta_max": 2.3, "btag_min": 0.3, "min_jets": 2.4}
# Finite-difference steps: 1e-4 of each parameter's range.
STEPS = np.array([1e-4 * (hi - lo) for lo, hi in (p["bounds"] for p in H.PARAMETERS.values())])
OFFSETS = (-2, -1, 1, 2)  # five-point stencil (truncation error O(h^4))

OBJECTIVES = {
    "significance": [{"type": "significance", "sigma_b": 0.2}],
    "target": [
        {"type": "target", "stat": "ttbar.jet_pt.mean", "value": 90.0, "weight": 0.01},
        {"type": "target", "stat": "dy.jet_pt.std", "value": 5.0, "weight": 0.02},
        {"type": "target", "stat": "dy.yield", "value": 0.0, "weight": 1e-4},
    ],
    "python": [{"type": "python", "function": "tests.userlosses:soft_ratio", "weight": 0.5}],
}
OBJECTIVES["sum"] = [t for terms in OBJECTIVES.values() for t in terms]
# [target] and [python] (their objective programs, ~10 s each cold) are slow: covered by
# [sum], which holds their terms (the same finite-difference oracle, the same objective
# program path); [significance] and [sum] run by default
KINDS = [pytest.param(k, marks=pytest.mark.slow) if k in ("target", "python") else k
         for k in OBJECTIVES]


@pytest.fixture(scope="module")
def passes(small_data):
    """States of every pass the finite differences need, computed once for all objectives.

    ``center``: order 2 (gradient and Hessian); ``shifted[(i, k)]``: parameter ``i``
    moved by ``k`` steps, order 1 (value and gradient).
    """
    ev = Evaluator(H.make_config(small_data))
    widths = np.array(H.WIDTHS)
    center = ev.run(CENTER, widths=widths, order=2)
    shifted = {}
    for i, name in enumerate(H.NAMES):
        for k in OFFSETS:
            params = dict(CENTER)
            params[name] += k * STEPS[i]
            shifted[(i, k)] = ev.run(params, widths=widths, order=1)
    return ev, center, shifted


@pytest.fixture(scope="module")
def evaluated(small_data, passes):
    """``evaluated(kind)``: objective results at the centre (order 2) and every shifted point.

    Cached per objective kind: the gradient and Hessian tests share them.
    """
    ev, center, shifted = passes
    cache: dict[str, tuple[dict, dict]] = {}

    def get(kind: str) -> tuple[dict, dict]:
        if kind not in cache:
            cfg = H.make_config(small_data, objective={"terms": OBJECTIVES[kind]})
            objective = Objective(cfg, ev.plan)
            at_center = objective_from_states(objective, center, order=2)
            around = {
                key: objective_from_states(objective, states) for key, states in shifted.items()
            }
            cache[kind] = (at_center, around)
        return cache[kind]

    return get


def _stencil(f) -> np.ndarray:
    """Five-point central difference of ``f(i, k)`` (value at ``k`` steps along parameter
    ``i``, from the precomputed passes), with a trailing axis over the parameters ``i``."""
    center = np.array([CENTER[n] for n in H.NAMES])

    def at(v: np.ndarray):
        i = int(np.flatnonzero(v != center)[0])
        return f(i, int(round((v[i] - center[i]) / STEPS[i])))

    return central_difference(at, center, STEPS, points=5)


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_matches_finite_differences(evaluated, kind):
    center, around = evaluated(kind)
    grad = center["grad"]
    assert grad.dtype == np.float64 and grad.shape == (len(H.NAMES),)
    fd = _stencil(lambda i, k: around[(i, k)]["objective"])
    # Compare in unit coordinates (the optimiser's), where all components are comparable.
    g_u, fd_u = grad * STEPS * 1e4, fd * STEPS * 1e4
    assert np.all(np.abs(g_u) > 1e-6 * np.abs(g_u).max()), f"degenerate gradient {grad}"
    np.testing.assert_allclose(g_u, fd_u, rtol=1e-6, atol=1e-8 * np.abs(g_u).max())


@pytest.mark.parametrize("kind", KINDS)
def test_hessian_matches_finite_differences_of_gradient(evaluated, kind):
    center, around = evaluated(kind)
    hess = center["hess"]
    assert hess.shape == (len(H.NAMES), len(H.NAMES))
    # Column i: derivative of the (exact, order-1) gradient along parameter i.
    fd = _stencil(lambda i, k: around[(i, k)]["grad"])
    scale = np.outer(STEPS, STEPS) * 1e8  # unit coordinates
    h_u, fd_u = hess * scale, fd * scale
    np.testing.assert_allclose(h_u, h_u.T, rtol=1e-10, atol=1e-12 * np.abs(h_u).max())
    np.testing.assert_allclose(h_u, fd_u, rtol=1e-5, atol=1e-7 * np.abs(h_u).max())
    # Off-diagonal terms matter (Newton uses them): they must be there, not just the diagonal.
    assert np.abs(h_u - np.diag(np.diag(h_u))).max() > 1e-3 * np.abs(h_u).max()


def test_yields_match_independent_numpy_hard_cut(small_data):
    """Hard-cut yields (widths 0) of the pipeline against uproot + numpy, with the xsec normalisation."""
    cfg = H.make_config(small_data)
    ev = Evaluator(cfg)
    objective = Objective(cfg, ev.plan)
    params = {"jet_pt_min": 32.5, "jet_abs_eta_max": 2.4, "btag_min": 0.1, "min_jets": 2.0}
    states = ev.run(params, widths=np.zeros(4), order=1)
    yields = objective_from_states(objective, states)["yields"]
    for name, xsec in (("ttbar", 831.76), ("dy", 6077.0)):
        jets = H.read_jets(sorted((small_data / name).glob("*.root")))
        sumw, sumw2, total = H.hard_cut_sums(jets, 2.4, [32.5], [0.1], 2)
        assert sumw[0, 0, 1] > 0
        norm = xsec * 10.0 / total
        assert states[name].sumw == pytest.approx(total, rel=1e-12)
        assert dataset_norm(cfg, name, states[name].sumw) == pytest.approx(norm, rel=1e-12)
        assert yields[name] == pytest.approx(norm * sumw[0, 0, 1], rel=1e-10)
        report = dataset_report(states[name], ev.plan)
        assert report["selected_sumw2"] == pytest.approx(sumw2[0, 0, 1], rel=1e-10)


# --- Z_A itself ------------------------------------------------------------------------

getcontext().prec = 50


def _z_decimal(s: float, b: float, var: float) -> float:
    """Z_A in 50-digit decimal arithmetic from the profile likelihood (see ``H.asimov_numpy``)."""
    s, b, var = Decimal(s), Decimal(b), Decimal(var)
    n = s + b
    if var == 0:
        return float((2 * (n * (n / b).ln() - s)).sqrt())
    tau = b / var
    m = tau * b
    bb = (n + m) / (1 + tau)
    z2 = 2 * (n * (n / bb).ln() + bb - n + m * (m / (tau * bb)).ln() + tau * bb - m)
    return float(z2.sqrt())


CASES = [  # (s, b, var): s/b from 0.01 to 100, background variance negligible to dominant
    (10.0, 100.0, 0.0),
    (10.0, 100.0, 1.0),
    (10.0, 100.0, 100.0),
    (10.0, 100.0, 1e4),
    (1000.0, 10.0, 1.0),
    (1000.0, 10.0, 3.0),
    (5.0, 5.0, 25.0),
    (50.0, 2e3, 4e4),
    (3e3, 5e4, 2.5e7),
    (1.0, 1e-2, 1e-5),
]


@pytest.mark.parametrize(("s", "b", "var"), CASES)
def test_asimov_matches_profile_likelihood(s, b, var):
    z = float(asimov_significance(s, b, var))
    assert z == pytest.approx(_z_decimal(s, b, var), rel=1e-9)
    assert z == pytest.approx(float(H.asimov_numpy(s, b, var)), rel=1e-6)


@pytest.mark.parametrize(("s", "b"), [(10.0, 100.0), (1000.0, 10.0), (5.0, 5.0), (100.0, 2e3)])
def test_asimov_known_background_limit(s, b):
    """var -> 0 tends to sqrt(2((s+b) ln(1+s/b) - s)), linearly in var, and continuously
    through the switch to the var = 0 formula."""
    limit = np.sqrt(2.0 * ((s + b) * np.log1p(s / b) - s))
    assert float(asimov_significance(s, b, 0.0)) == pytest.approx(limit, rel=1e-12)
    slopes = []
    for k in range(4, 9):
        var = b * b * 10.0**-k
        z = float(asimov_significance(s, b, var))
        assert z < limit
        slopes.append((limit - z) / var)
    # (limit - Z) / var settles to the derivative at var = 0.
    assert slopes[-1] == pytest.approx(slopes[-2], rel=1e-3)
    assert slopes[-2] == pytest.approx(slopes[-3], rel=1e-2)
    # Below a tiny var the var = 0 formula takes over: the jump there is only the
    # neglected linear term, slope x var.
    threshold = 1e-12 * b * b
    above = float(asimov_significance(s, b, 1.01 * threshold))
    below = float(asimov_significance(s, b, 0.99 * threshold))
    assert below == pytest.approx(limit, rel=1e-12)
    assert abs(above - below) <= 1.1 * slopes[-1] * threshold + 1e-12 * limit


@pytest.mark.parametrize("rel_var", [0.0, 1e-2, 1.0])
@pytest.mark.parametrize("s_over_b", [1e-3, 1e-4])
def test_asimov_small_signal_limit(s_over_b, rel_var):
    """s << b: Z_A ~ s / sqrt(b + var), up to terms of relative order s/b."""
    b = 1e4
    s, var = s_over_b * b, rel_var * b * b
    z = float(asimov_significance(s, b, var))
    assert z == pytest.approx(s / np.sqrt(b + var), rel=2 * s_over_b)


@pytest.mark.parametrize(
    ("s", "b", "var", "rel"),
    [
        (0.5, 2e3, 4e4, 1e-12),
        (1.0, 1e4, 1e8, 1e-12),
        (1e-2, 1e4, 1e8, 1e-12),
        (1e-4, 1e4, 0.0, 1e-12),
    ],
)
def test_asimov_precision_for_small_signals(s, b, var, rel):
    # The textbook form loses ~eps (b/s)^2 relative here (0 instead of 1e-7 at the
    # last point); the cancellation-free form keeps full precision.
    assert float(asimov_significance(s, b, var)) == pytest.approx(_z_decimal(s, b, var), rel=rel)


@pytest.mark.parametrize(
    ("s", "b", "var"), [(10.0, 100.0, 100.0), (1000.0, 10.0, 3.0), (5.0, 5.0, 0.0)]
)
def test_asimov_gradient_matches_finite_differences(s, b, var):
    x = jnp.array([s, b, var], dtype=jnp.float64)
    grad = np.asarray(jax.grad(lambda v: asimov_significance(v[0], v[1], v[2]))(x))
    steps = 1e-5 * np.maximum(np.abs(np.asarray(x)), 1.0)
    # var = 0 is one-sided (the branch switch): no difference along var there.
    indices = [0, 1] if var == 0 else [0, 1, 2]
    fd = central_difference(lambda v: _z_decimal(*v), np.asarray(x), steps, indices=indices)
    np.testing.assert_allclose(grad[: len(fd)], fd, rtol=1e-7)


def test_one_compiled_objective_serves_samples_of_other_totals(small_data):
    """The datasets' totals and the MC variance's factor are arguments of the compiled
    objective, not constants of it: keep-best's training, held-out and whole samples
    (other sums of weights, events and variance factors) run one program, and each
    sample's yields follow its own totals (xsec * lumi / sumw)."""
    import copy

    cfg = H.make_config(small_data)
    ev = Evaluator(cfg)
    params = {"jet_pt_min": 32.5, "jet_abs_eta_max": 2.4, "btag_min": 0.1, "min_jets": 2.0}
    states = ev.run(params, widths=np.array(H.WIDTHS), order=1)
    shared = Objective(cfg, ev.plan)
    for scale, (f, g) in zip((1.0, 0.7, 0.3), ((1.0, 1.0), (0.7, 0.6), (0.3, 0.45)),
                             strict=True):
        sample = {}
        for (name, st), k in zip(states.items(), (f, g), strict=True):
            sample[name] = copy.copy(st)
            sample[name].sumw, sample[name].events = st.sumw * k, max(1, int(st.events * k))
        shared.variance_scale = scale
        got = objective_from_states(shared, sample)
        alone = Objective(cfg, ev.plan)  # its own program, compiled for these totals
        alone.variance_scale = scale
        want = objective_from_states(alone, sample)
        for name, xsec in (("ttbar", 831.76), ("dy", 6077.0)):
            selected = float(np.asarray(dataset_report(sample[name], ev.plan)["selected_sumw"]))
            norm = xsec * 10.0 / sample[name].sumw
            assert got["yields"][name] == pytest.approx(norm * selected, rel=1e-12)
        assert got["objective"] == pytest.approx(want["objective"], rel=1e-13)
        np.testing.assert_allclose(got["grad"], want["grad"], rtol=1e-12)
    assert len(shared._compiled) == 1
