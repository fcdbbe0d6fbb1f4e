"""The fused float32 soft-cut kernel against the float64 path (analysis.stats._core)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats
from analysis.stats import _core, fused

WIDTHS = (5.0, 0.1, 0.05)
SIGNS = (1, -1, 1)
ABSOLUTE = (False, True, False)
THETA = np.array([30.0, 2.4, 0.3])


def _sample(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pt = (15.0 + rng.exponential(40.0, n)).astype(np.float32)
    eta = rng.normal(0.0, 1.5, n).astype(np.float32)
    btag = rng.uniform(0.0, 1.0, n).astype(np.float32)
    return pt, eta, btag


def _reference(pt, eta, btag, base=None):  # noqa: ANN001, ANN202
    """float64 state and its Jacobian by autodiff (jacfwd) of _core.moments."""
    x, e, b = (jnp.asarray(a, dtype=jnp.float64) for a in (pt, eta, btag))

    def state(theta: jax.Array) -> _core.Moments:
        w = (
            jax.nn.sigmoid((x - theta[0]) / WIDTHS[0])
            * jax.nn.sigmoid((theta[1] - jnp.abs(e)) / WIDTHS[1])
            * jax.nn.sigmoid((b - theta[2]) / WIDTHS[2])
        )
        if base is not None:
            w = w * base
        return _core.moments(x, w)

    theta = jnp.asarray(THETA)
    return state(theta), jax.jacfwd(state)(theta)


def _compare_state(got: _core.Moments, ref: _core.Moments, rtol: float) -> None:
    """Sums of like-signed terms relative to themselves; the mean relative to the
    spread, and M3 relative to sqrt(M2 M4) (which bounds sum w |d|^3)."""
    std = float(np.sqrt(ref.m2 / ref.sumw))
    np.testing.assert_allclose(got.sumw, ref.sumw, rtol=rtol)
    np.testing.assert_allclose(got.mean, ref.mean, rtol=0, atol=rtol * std)
    np.testing.assert_allclose(got.m2, ref.m2, rtol=rtol)
    np.testing.assert_allclose(got.m3, ref.m3, rtol=0, atol=rtol * float(np.sqrt(ref.m2 * ref.m4)))
    np.testing.assert_allclose(got.m4, ref.m4, rtol=rtol)


def _compare_jacobian(got: _core.Moments, ref: _core.Moments, rtol: float) -> None:
    """Each field's derivatives relative to the largest of them (normwise)."""
    for field in ("sumw", "dmean", "m2", "m3", "m4"):
        g, r = np.asarray(getattr(got, field)), np.asarray(getattr(ref, field))
        np.testing.assert_allclose(g, r, rtol=0, atol=rtol * np.max(np.abs(r)), err_msg=field)
    np.testing.assert_array_equal(got.center, 0.0)


# (n, block_size, inner_blocks): empty; fewer elements than a block; the defaults;
# a last block overlapping the previous one and a last group with masked blocks.
@pytest.mark.parametrize(
    ("n", "block", "inner"), [(0, 4096, 8), (1, 4096, 8), (50_000, 4096, 8), (50_001, 1000, 3)]
)
def test_fused_matches_float64_path(n: int, block: int, inner: int) -> None:
    pt, eta, btag = _sample(n)
    state, jac = jax.jit(
        lambda th: fused.soft_moments_and_jacobian(
            pt,
            (pt, eta, btag),
            th,
            WIDTHS,
            SIGNS,
            absolute=ABSOLUTE,
            block_size=block,
            inner_blocks=inner,
        )
    )(jnp.asarray(THETA))
    if n == 0:
        assert all(float(v) == 0.0 for v in state)
        assert all(np.all(np.asarray(v) == 0.0) for v in jac)
        return
    ref_state, ref_jac = _reference(pt, eta, btag)
    _compare_state(state, ref_state, 1e-6)
    if n > 1:  # one element: M2 = 0 and its derivatives are rounding noise
        _compare_jacobian(jac, ref_jac, 1e-5)


def test_stats_and_jacobian_match_public_api() -> None:
    pt, eta, btag = _sample(30_000, seed=1)
    values, jac = jax.jit(
        lambda th: fused.soft_stats_and_jacobian(
            pt, (pt, eta, btag), th, WIDTHS, SIGNS, absolute=ABSOLUTE
        )
    )(jnp.asarray(THETA))
    x, e, b = (jnp.asarray(a, dtype=jnp.float64) for a in (pt, eta, btag))

    def api(theta: jax.Array) -> jax.Array:
        w = (
            jax.nn.sigmoid((x - theta[0]) / 5.0)
            * jax.nn.sigmoid((theta[1] - jnp.abs(e)) / 0.1)
            * jax.nn.sigmoid((b - theta[2]) / 0.05)
        )
        return jnp.stack(
            [
                stats.mean(x, weight=w),
                stats.var(x, weight=w),
                stats.skew(x, weight=w),
                stats.kurtosis(x, weight=w),
            ]
        )

    theta = jnp.asarray(THETA)
    np.testing.assert_allclose(values, api(theta), rtol=1e-6)
    ref = np.asarray(jax.jacfwd(api)(theta))
    # each row relative to its largest entry (entries cancel between W and M_k terms)
    np.testing.assert_allclose(jac, ref, rtol=1e-4, atol=0)
    err = np.abs(np.asarray(jac) - ref) / np.max(np.abs(ref), axis=1, keepdims=True)
    assert np.max(err) < 2e-5


def test_far_centre_is_refined() -> None:
    """The subsample has no weight (so its centre is the unweighted mean, ~1000 away
    from the selected values): the second pass about the mean keeps the precision."""
    n = 2 * 65536 + 10
    rng = np.random.default_rng(5)
    pt = np.where(np.arange(n) % 2 == 1, 1000.0, 0.0) + rng.normal(0, 1, n)
    pt = pt.astype(np.float32)
    base = (np.arange(n) % 2 == 1).astype(np.float32)  # the strided subsample: weight 0
    eta = np.zeros(n, np.float32)
    btag = np.ones(n, np.float32)
    state, _ = fused.soft_moments_and_jacobian(
        pt,
        (pt, eta, btag),
        jnp.asarray([0.0, 2.4, 0.3]),
        WIDTHS,
        SIGNS,
        absolute=ABSOLUTE,
        weight=base,
    )
    x = np.asarray(pt, np.float64)[1::2]
    np.testing.assert_allclose(state.mean, x.mean(), rtol=1e-9)
    np.testing.assert_allclose(state.m2 / state.sumw, x.var(), rtol=1e-5)
    assert abs(float(state.center) - x.mean()) < 1.0


def test_rejects_bad_arguments() -> None:
    pt, eta, btag = _sample(10)
    with pytest.raises(ValueError, match=r"cut_values\[1\]: expected shape \(10,\)"):
        fused.soft_moments_and_jacobian(pt, (pt, eta[:5]), THETA[:2], WIDTHS[:2], SIGNS[:2])
    with pytest.raises(ValueError, match="signs: expected 3 values of \\+1 or -1"):
        fused.soft_moments_and_jacobian(pt, (pt, eta, btag), THETA, WIDTHS, (1, 0, 1))
    with pytest.raises(ValueError, match="thetas and widths: expected shape"):
        fused.soft_moments_and_jacobian(pt, (pt, eta, btag), THETA[:2], WIDTHS, SIGNS)
