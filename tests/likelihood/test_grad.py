"""dZ/dparam of a whole (toy) chunked pass against central finite differences with the
fit rerun at each point; chunk invariance of Z; no NaN with empty bins or no signal."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import likelihood as lk
from analysis import stats
from tests.conftest import central_difference

EDGES = [100.0, 200.0, 300.0, 450.0, 700.0]
THETA = {"xcut": 160.0, "ycut": 45.0}
NAMES = sorted(THETA)


def _events(kind, n, seed):
    rng = np.random.default_rng(seed)
    if kind == "sig":
        x, y = rng.normal(380.0, 120.0, n), rng.gamma(6.0, 12.0, n)
    else:
        x, y = 60.0 + rng.exponential(150.0, n), rng.gamma(3.0, 12.0, n)
    w = rng.uniform(0.5, 1.5, n) * (0.02 if kind == "sig" else 0.1)
    return {"x": x, "y": y, "w": w, "ps": rng.normal(0.0, 1.0, n)}


def chunk_fn(ev):
    """One chunk: soft cuts x > xcut, y > ycut; a weight systematic (ps) and a
    jet-energy-scale-like shift of x and y (1 +- 0.03) that moves cuts and bins together."""

    def fn(theta):
        def hist(scale, weight):
            x, y = ev["x"] * scale, ev["y"] * scale
            p = jax.nn.sigmoid((x - theta["xcut"]) / 20.0) * jax.nn.sigmoid(
                (y - theta["ycut"]) / 8.0
            )
            return stats.histogram(x, EDGES, weight=weight, prob=p)

        w = ev["w"]
        return {
            "ht": hist(1.0, w),
            "ht_ps_up": hist(1.0, w * (1 + 0.1 * np.tanh(ev["ps"]))),
            "ht_ps_down": hist(1.0, w * (1 - 0.08 * np.tanh(ev["ps"]))),
            "ht_jes_up": hist(1.03, w),
            "ht_jes_down": hist(0.97, w),
        }

    return fn


DATA = {
    "sig": _events("sig", 3000, 1),
    "bkg": _events("bkg", 6000, 2),
    "dy": _events("bkg", 2000, 3),
}
MODEL = lk.Model(
    [
        lk.Channel(
            "sr", "ht", {"ps": ("ht_ps_up", "ht_ps_down"), "jes": ("ht_jes_up", "ht_jes_down")}
        )
    ],
    ["sig"],
    [lk.Normalisation("dy_norm", ["dy"], 1.1)],
)


def run(theta, *, order=1, splits=(0, 1000, 2500)):
    """The pass: every dataset in chunks, each chunk derived, merged with ``+``."""
    out = {}
    for ds, ev in DATA.items():
        n = ev["w"].size
        bounds = [*splits, n]
        chunks = [
            {k: v[a:b] for k, v in ev.items()} for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        out[ds] = sum(stats.derive(chunk_fn(c), theta, order=order) for c in chunks)
    return stats.join(out)


def z_of(t, objective=lk.discovery_significance):
    d = run(dict(zip(NAMES, t, strict=True)), order=0)
    return float(objective(d.value, MODEL))


@functools.cache
def fd_z() -> list[float]:
    """Central differences of Z over the whole pass (the fit rerun at each point): the
    reference of the gradient tests below, computed once per test process."""
    return central_difference(z_of, [THETA[n] for n in NAMES], 0.05, points=5)


@pytest.mark.parametrize("gradient", ["envelope", "implicit"])
def test_z_gradient_equals_finite_differences_of_the_pass(gradient):
    d = run(THETA)
    z, grad = d.value_and_grad(lambda s: lk.discovery_significance(s, MODEL, gradient=gradient))
    fd = fd_z()
    assert z > 0.5
    for i, n in enumerate(NAMES):
        assert abs(grad[n] - fd[i]) <= 1e-5 * max(abs(fd[i]), 1e-3), (n, grad[n], fd[i])
    assert max(abs(v) for v in grad.values()) > 1e-3


def test_jax_grad_through_differentiable_pass():
    f = stats.differentiable(lambda th: run(th))
    g = jax.grad(lambda th: lk.discovery_significance(f(th), MODEL))(THETA)
    fd = fd_z()
    for i, n in enumerate(NAMES):
        assert abs(float(g[n]) - fd[i]) <= 1e-5 * max(abs(fd[i]), 1e-3)
    assert f.passes() == 1


def test_mu_uncertainty_gradient_equals_finite_differences():
    d = run(THETA)
    _, grad = d.value_and_grad(lambda s: lk.mu_uncertainty(s, MODEL))
    fd = central_difference(
        lambda t: z_of(t, lk.mu_uncertainty), [THETA[n] for n in NAMES], 0.05, points=5
    )
    for i, n in enumerate(NAMES):
        assert abs(grad[n] - fd[i]) <= 1e-5 * max(abs(fd[i]), 1e-4), (n, grad[n], fd[i])


def test_chunking_does_not_change_z():
    a = run(THETA, splits=(0,))
    b = run(THETA, splits=(0, 17, 900, 2222))
    za, ga = a.value_and_grad(lambda s: lk.discovery_significance(s, MODEL))
    zb, gb = b.value_and_grad(lambda s: lk.discovery_significance(s, MODEL))
    assert abs(za - zb) <= 1e-10 * za
    for n in NAMES:
        assert abs(ga[n] - gb[n]) <= 1e-10 * max(abs(ga[n]), 1e-12)


def _bins(sig, bkg, sumw2_frac=0.05):
    def h(v):
        v = jnp.asarray(v, dtype=jnp.float64)
        zero = jnp.zeros(1)
        flow = (
            jnp.concatenate([zero, v, zero]),
            jnp.concatenate([zero, sumw2_frac * jnp.abs(v), zero]),
        )
        return stats.Histogram([0, 1, 2, 3], *flow)

    return {"sig": {"h": h(sig)}, "bkg": {"h": h(bkg)}}


@pytest.mark.parametrize("mc_stat", [True, False])
def test_empty_background_bin_is_finite(mc_stat):
    """An empty background bin with signal: the floor keeps Z and its gradient finite."""
    model = lk.Model([lk.Channel("sr", "h")], ["sig"], mc_stat=mc_stat)

    def z(scale):
        return lk.discovery_significance(
            _bins(jnp.array([2.0, 3.0, 1.0]) * scale, [10.0, 0.0, 5.0]), model
        )

    value, grad = jax.value_and_grad(z)(1.0)
    assert np.isfinite(float(value)) and np.isfinite(float(grad)) and float(value) > 1.0


def test_no_signal_gives_zero_with_zero_gradient():
    model = lk.Model([lk.Channel("sr", "h")], ["sig"])

    def z(scale):
        return lk.discovery_significance(_bins(jnp.zeros(3) * scale, [10.0, 4.0, 5.0]), model)

    value, grad = jax.value_and_grad(z)(1.0)
    assert float(value) == 0.0 and float(grad) == 0.0


def _two_bin_states(x):
    s, b = x[0], x[1]
    z = jnp.zeros(1)

    def h(v, w2):
        return stats.Histogram([0, 1, 2], jnp.concatenate([z, v, z]), jnp.concatenate([z, w2, z]))

    sig, bkg = jnp.stack([s, 2 * s]), jnp.stack([b, 0.5 * b])
    return {
        "sig": {"h": h(sig, 0.1 * sig), "u": h(sig * 1.1, sig * 0), "d": h(sig * 0.95, sig * 0)},
        "bkg": {"h": h(bkg, 0.05 * bkg), "u": h(bkg * 1.04, bkg * 0), "d": h(bkg * 0.97, bkg * 0)},
    }


@pytest.mark.slow
def test_implicit_hessian_equals_finite_differences_of_the_gradient():
    """Second derivatives need the fitted point's own derivative: gradient="implicit"."""
    model = lk.Model(
        [lk.Channel("sr", "h", {"jes": ("u", "d")})], ["sig"], [lk.Normalisation("n", ["bkg"], 1.1)]
    )
    x0 = jnp.array([5.0, 20.0])
    hess = jax.hessian(
        lambda x: lk.discovery_significance(_two_bin_states(x), model, gradient="implicit")
    )(x0)
    grad = jax.grad(lambda x: lk.discovery_significance(_two_bin_states(x), model))
    fd = central_difference(
        lambda x: np.asarray(grad(jnp.asarray(x))), np.asarray(x0), 1e-3, points=5
    )
    np.testing.assert_allclose(np.asarray(hess), fd, rtol=1e-6, atol=1e-9)
