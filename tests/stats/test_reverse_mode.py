"""Reverse mode across chunks (issue 18) on synthetic data, no files.

* ``stats.differentiable(run, mode="reverse")`` gives the gradients of forward mode
  (1e-10) for every statistic of moments, co-moments and sums, for several chunkings
  (an empty chunk included) and merge orders; the reverse gradient is the same for
  every chunking (1e-10).
* With 1,000+ parameters (an equinox MLP score in ``theta`` beside a cut), directional
  derivatives along random directions equal central finite differences of the whole
  pass (1e-6).
* Pytree parameters, ``mode="auto"``, ``jax.jit``, ``jax.hessian``'s one-line refusal,
  a processor that drops the pass object, a non-deterministic pass, undefined (NaN)
  states with finite gradients, pickling.
"""

from __future__ import annotations

import itertools
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from analysis import stats
from analysis.soft import soft_cut
from analysis.stats.derive import AUTO_FORWARD_MAX, PassTheta, Pullback, choose_mode

THETA = {"x_min": 0.3, "y_max": 1.2}
CHUNKINGS = [(0, 200), (0, 50, 50, 100, 150, 200), (0, 7, 120, 200)]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    x = rng.gamma(2.0, 0.7, 200)  # skewed: the third and fourth moments matter
    return x, 0.5 * x + rng.normal(0.0, 0.7, 200)


def chunk_fn(x, y):
    def fn(theta):
        w = soft_cut(y, "<", theta["y_max"], 0.3) * soft_cut(x, ">", theta["x_min"], 0.4)
        return {
            "x": stats.moments(x, weight=w),
            "y": stats.moments(1e3 + y, weight=w * w),  # far from 0: the centring matters
            "xy": stats.comoments(x, y, weight=w),
            "n": jnp.sum(w),
            "bins": jnp.stack([jnp.sum(w * (x > 1.0)), jnp.sum(w * (x <= 1.0))]),
        }

    return fn


def runner(x, y, bounds, *, reverse_order=False):
    def run(theta):
        parts = [stats.derive(chunk_fn(x[a:b], y[a:b]), theta) for a, b in itertools.pairwise(bounds)]
        return sum(parts[::-1] if reverse_order else parts)

    return run


def loss_of(f):
    def loss(theta):
        s = f(theta)
        return (
            (stats.mean(s["x"]) - 1.5) ** 2
            + stats.var(s["x"])
            + stats.skew(s["x"])
            + stats.kurtosis(s["x"])
            + stats.std(s["y"])
            + stats.kurtosis(s["y"])
            + stats.corr(s["xy"])
            + stats.linear_fit(s["xy"]).slope
            + stats.covar(s["xy"])
            + 0.01 * s["n"]
            + 0.1 * s["bins"][0] ** 2
        )

    return loss


def _close(got, want, rtol, what=""):
    for k in want:
        assert float(got[k]) == pytest.approx(float(want[k]), rel=rtol, abs=1e-13), (what, k)


def test_reverse_equals_forward_on_every_chunking(data) -> None:
    x, y = data
    reference = None
    for bounds in CHUNKINGS:
        # one chunk merges alone: its reverse order is the same pass (not run twice)
        for reverse_order in (False, True)[: 1 + (len(bounds) > 2)]:
            run = runner(x, y, bounds, reverse_order=reverse_order)
            fwd = stats.differentiable(run, mode="forward")
            rev = stats.differentiable(run, mode="reverse")
            v_f, g_f = jax.value_and_grad(loss_of(fwd))(THETA)
            v_r, g_r = jax.value_and_grad(loss_of(rev))(THETA)
            assert rev.passes() == 2 and fwd.passes() == 1
            assert float(v_r) == pytest.approx(float(v_f), rel=1e-12)
            _close(g_r, g_f, 1e-10, bounds)
            assert all(float(g_r[k]) != 0.0 for k in THETA)
            if reference is None:
                reference = g_r
            _close(g_r, reference, 1e-10, ("chunk invariance", bounds, reverse_order))


@pytest.mark.slow
def test_reverse_gradient_of_every_state_field(data) -> None:
    """Each field of each merged state, one at a time: the pullback of that field alone
    (a cotangent with one non-zero entry) equals its forward-mode Jacobian row."""
    x, y = data
    run = runner(x, y, CHUNKINGS[2])
    fwd = stats.differentiable(run, mode="forward")
    rev = stats.differentiable(run, mode="reverse")
    leaves = jax.tree_util.tree_leaves(fwd(THETA))
    for i in range(len(leaves)):
        for j in range(int(np.size(leaves[i]))):

            def pick(f, i=i, j=j):
                return lambda th: jnp.ravel(jax.tree_util.tree_leaves(f(th))[i])[j]

            g_f, g_r = jax.grad(pick(fwd))(THETA), jax.grad(pick(rev))(THETA)
            _close(g_r, g_f, 1e-10, (i, j))


def _plain(x, y, bounds, theta_vec, unravel, score_loss):
    total = None
    for a, b in itertools.pairwise(bounds):
        part = stats.derive(score_loss(x[a:b], y[a:b]), unravel(theta_vec), order=0)
        total = part if total is None else total + part
    return total.value


def test_thousand_parameters_directional_derivatives_match_finite_differences(data) -> None:
    x, y = data
    net = stats.mlp(2, hidden=(30, 30), seed=3)
    theta = {"cut": 0.1, "net": net}
    standard = stats.Standardisation(np.array([1.0, 0.5]), np.array([1.0, 0.9]))

    def fn_of(xc, yc):
        def fn(th):
            s = stats.score(th["net"], [xc, yc], standard=standard)
            w = soft_cut(s, ">", th["cut"], 0.5)
            return {"x": stats.moments(xc, weight=w), "n": jnp.sum(w)}

        return fn

    bounds = CHUNKINGS[1]

    def run(th):
        return sum(stats.derive(fn_of(x[a:b], y[a:b]), th) for a, b in itertools.pairwise(bounds))

    f = stats.differentiable(run)  # auto: reverse for this many parameters
    assert f.mode_for(theta) == "reverse"

    def g(s):
        return stats.mean(s["x"]) + stats.std(s["x"]) + 0.01 * s["n"]

    flat, unravel = ravel_pytree(theta)
    assert flat.size >= 1000
    grad = jax.grad(lambda th: g(f(th)))(theta)
    gflat, _ = ravel_pytree(grad)
    assert f.passes() == 2
    rng = np.random.default_rng(5)
    h = 1e-4
    for _ in range(3):
        v = rng.normal(size=flat.size)
        v /= np.linalg.norm(v)
        plus = g(_plain(x, y, bounds, flat + h * v, unravel, fn_of))
        minus = g(_plain(x, y, bounds, flat - h * v, unravel, fn_of))
        fd = float(plus - minus) / (2 * h)
        assert float(gflat @ v) == pytest.approx(fd, rel=1e-6, abs=1e-10)


def test_pytree_parameters_in_both_modes(data) -> None:
    x, y = data
    theta = {"cuts": np.array([0.3, 1.2]), "scale": {"s": 2.0}}

    def fn_of(xc, yc):
        def fn(th):
            w = soft_cut(xc, ">", th["cuts"][0], 0.4) * soft_cut(yc, "<", th["cuts"][1], 0.3)
            return {"x": stats.moments(th["scale"]["s"] * xc, weight=w)}

        return fn

    def run(th):
        return sum(stats.derive(fn_of(x[a:b], y[a:b]), th) for a, b in itertools.pairwise(CHUNKINGS[2]))

    d = run(theta)
    assert d.names == ("cuts[0]", "cuts[1]", "scale.s")
    grads = []
    for mode in ("forward", "reverse"):
        f = stats.differentiable(run, mode=mode)
        grads.append(jax.grad(lambda th, f=f: stats.var(f(th)["x"]))(theta))
    np.testing.assert_allclose(grads[0]["cuts"], grads[1]["cuts"], rtol=1e-10)
    assert float(grads[1]["scale"]["s"]) == pytest.approx(float(grads[0]["scale"]["s"]), rel=1e-10)
    with pytest.raises(ValueError, match=r"theta\['cuts\[1\]'\] = nan: expected a finite number"):
        stats.derive(fn_of(x, y), {"cuts": np.array([0.3, np.nan]), "scale": {"s": 1.0}})
    with pytest.raises(TypeError, match=r"theta\['scale.s'\]: expected a number or a real array"):
        stats.derive(fn_of(x, y), {"cuts": np.array([0.3, 1.0]), "scale": {"s": "big"}})


def test_auto_mode_jit_and_hessian(data) -> None:
    x, y = data
    run = runner(x, y, CHUNKINGS[1])
    auto = stats.differentiable(run)
    assert auto.mode_for(THETA) == "forward"
    assert auto.mode_for({"w": np.zeros(AUTO_FORWARD_MAX + 1)}) == "reverse"
    assert choose_mode(AUTO_FORWARD_MAX) == "forward" and choose_mode(10_000, "forward") == "forward"
    rev = stats.differentiable(run, mode="reverse")
    loss = loss_of(rev)
    eager = jax.grad(loss)(THETA)
    jitted = jax.jit(jax.grad(loss))(THETA)
    _close(jitted, eager, 1e-12)
    with pytest.raises(ValueError, match=r"mode='forward'\) \(with stats.derive\(\.\.\., order=2\)"):
        jax.hessian(loss)(THETA)
    with pytest.raises(ValueError, match="mode: expected 'auto', 'forward' or 'reverse'"):
        stats.differentiable(run, mode="backward")
    fresh = stats.differentiable(run, mode="reverse")
    with pytest.raises(ValueError, match="call f\\(theta\\) once outside jax.jit first"):
        jax.jit(lambda th: fresh(th)["n"])(THETA)


def test_a_pass_that_drops_theta_or_is_not_deterministic(data) -> None:
    x, y = data

    def copying(theta):  # a processor that rebuilds theta as a plain dict
        return stats.derive(chunk_fn(x, y), dict(theta))

    f = stats.differentiable(copying, mode="reverse")
    with pytest.raises(ValueError, match="returned a Derived of order 1; pass the theta given"):
        f(THETA)
    calls = []

    def drifting(theta):  # the second pass sees other events
        calls.append(1)
        n = 200 if len(calls) == 1 else 150
        return stats.derive(chunk_fn(x[:n], y[:n]), theta)

    g = stats.differentiable(drifting, mode="reverse")
    with pytest.raises(ValueError, match="different states in its two passes at"):
        jax.grad(lambda th: g(th)["n"])(THETA)


def test_undefined_states_keep_finite_gradients(data) -> None:
    """A state with an infinite value is NaN; a loss of the other states has the same,
    finite gradient in both modes (no 0 * NaN in the pullback)."""
    x, y = data
    bad = x.copy()
    bad[3] = np.inf

    def run(theta):
        parts = []
        for a, b in itertools.pairwise(CHUNKINGS[1]):

            def fn(th, a=a, b=b):
                w = soft_cut(x[a:b], ">", th["x_min"], 0.4)
                return {"bad": stats.moments(bad[a:b], weight=w), "good": stats.moments(x[a:b], weight=w)}

            parts.append(stats.derive(fn, theta))
        return sum(parts)

    grads = []
    for mode in ("forward", "reverse"):
        f = stats.differentiable(run, mode=mode)
        assert np.isnan(float(stats.var(f({"x_min": 0.3})["bad"])))
        grads.append(jax.grad(lambda th, f=f: stats.var(f(th)["good"]))({"x_min": 0.3}))
    assert np.isfinite(float(grads[1]["x_min"]))
    assert float(grads[1]["x_min"]) == pytest.approx(float(grads[0]["x_min"]), rel=1e-10)


def test_pass_objects_pickle_and_merge(data) -> None:
    x, y = data
    theta = PassTheta({"x_min": np.float64(0.3), "y_max": np.float64(1.2)}, "values")
    back = pickle.loads(pickle.dumps(theta))
    assert back.task == "values" and back["x_min"] == 0.3 and sorted(back) == ["x_min", "y_max"]
    d = stats.derive(chunk_fn(x, y), back)
    assert d.order == 0
    p = Pullback(d.names, d.value, np.ones(2))
    q = pickle.loads(pickle.dumps(p))
    merged = sum([p, q])
    np.testing.assert_array_equal(merged.grad, [2.0, 2.0])
    assert float(merged.value["n"]) == pytest.approx(2 * float(d.value["n"]), rel=1e-14)
    with pytest.raises(ValueError, match="parameter names differ"):
        p + Pullback(("a", "b"), d.value, np.ones(2))
    with pytest.raises(ValueError, match="task: expected 'values' or 'pullback'"):
        PassTheta({}, "jvp")
