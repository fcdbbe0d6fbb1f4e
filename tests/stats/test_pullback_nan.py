"""The pulled sum with a non-finite entry (:mod:`analysis.stats.pullback`): each entry adds
its own share, against the closed form ``dL/dw_i = sum_r T_bar_r (x_i - a)^r`` (``L =
<T_bar, T>``, ``T_r = sum_i w_i (x_i - a)^r``), NaN only in what the non-finite entry
reaches; finite entries the same bits as without the guard. Synthetic, no files."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis.stats import _core
from analysis.stats.pullback import finite_entries, pulled_sum

X = np.array([0.4, 1.3, 2.2, 0.9, 3.1, 1.7])
C = np.array([1.1, 0.7, 1.9, 0.5, 1.3, 0.8])
A = 1.5  # the payload's anchor
T_BAR = (0.3, -0.2, 0.15, 0.05, -0.01)


def _loss(theta, x, guard: bool):
    """``L`` of the moments of entries ``x`` with weights ``w_i = theta_i^2 C_i`` (each
    entry its own parameter)."""
    w = theta * theta * C
    if guard:
        w, x = finite_entries(w, x)
    payload = [(jnp.float64(A), tuple(jnp.float64(t) for t in T_BAR))]
    return pulled_sum([_core.moments(x, w)], payload)


def _closed_form(theta, x) -> np.ndarray:
    return np.array([2.0 * theta[i] * C[i] * sum(t * (x[i] - A) ** r for r, t in enumerate(T_BAR))
                     for i in range(len(x))])


@pytest.mark.parametrize("where", ["weight", "value"])
def test_a_nan_entry_leaves_the_others_their_shares(where: str) -> None:
    """A NaN weight (a NaN probability) or a NaN value: the gradient is NaN in that
    entry's parameter alone, every other entry's the closed form (1e-12); without the
    guard (the chunk's NaN state, linearised) not."""
    theta = np.linspace(0.6, 1.4, len(X))
    x = X.copy()
    if where == "value":
        x[2] = np.nan
    else:
        theta[2] = np.nan
    g = np.asarray(jax.grad(_loss)(jnp.asarray(theta), jnp.asarray(x), True))
    assert np.isnan(g[2])
    keep = np.arange(len(X)) != 2
    np.testing.assert_allclose(g[keep], _closed_form(theta, x)[keep], rtol=1e-12)
    bare = np.asarray(jax.grad(_loss)(jnp.asarray(theta), jnp.asarray(x), False))
    assert not np.allclose(bare[keep], _closed_form(theta, x)[keep], rtol=1e-6)


def test_finite_entries_change_no_bit() -> None:
    """All entries finite: the guarded pulled sum's value and gradient are the unguarded
    ones, bit for bit, and the closed form's (1e-12)."""
    theta, x = jnp.linspace(0.6, 1.4, len(X)), jnp.asarray(X)
    v0, g0 = jax.value_and_grad(_loss)(theta, x, False)
    v1, g1 = jax.value_and_grad(_loss)(theta, x, True)
    assert float(v0) == float(v1)
    np.testing.assert_array_equal(np.asarray(g0), np.asarray(g1))
    np.testing.assert_allclose(np.asarray(g1), _closed_form(theta, X), rtol=1e-12)


def test_a_nan_sum_keeps_its_cotangent() -> None:
    """A plain sum with one NaN addend: its cotangent reaches every addend (NaN only in
    the NaN one's parameter), where dropping the sum would give 0."""
    theta = np.array([1.0, 2.0, np.nan, 4.0])

    def loss(t):
        return pulled_sum([jnp.sum(t * t * C[:4])], [(None, jnp.float64(0.5))])

    g = np.asarray(jax.grad(loss)(jnp.asarray(theta)))
    np.testing.assert_array_equal(np.isnan(g), [False, False, True, False])
    np.testing.assert_allclose(g[[0, 1, 3]], theta[[0, 1, 3]] * C[[0, 1, 3]], rtol=1e-15)


def test_data_values_take_no_nan_tangent() -> None:
    """Forward mode through :func:`finite_entries` with values that are data (no tangent)
    and a NaN weight: the values' tangent is 0, not ``0 * NaN``; the NaN weight's own
    tangent passes through; values with a tangent: NaN in the NaN weight's entry
    (``dL/dx`` is ``w`` times a polynomial)."""
    x = jnp.asarray(X)

    def entries(t):
        w = t * jnp.asarray(C)
        return finite_entries(w.at[2].set(jnp.nan), x)

    (w, fx), (dw, dx) = jax.jvp(entries, (jnp.float64(1.0),), (jnp.float64(1.0),))
    assert float(w[2]) == 0.0 and float(fx[2]) == 0.0
    np.testing.assert_array_equal(np.asarray(dx), np.zeros(len(X)))
    np.testing.assert_array_equal(np.asarray(dw), np.where(np.arange(len(X)) == 2, 0.0, C))

    def scored(t):  # values with a tangent (a score's column): NaN where w is
        return finite_entries(jnp.asarray(C).at[2].set(jnp.nan), t * x)

    _, (_, dx) = jax.jvp(scored, (jnp.float64(1.0),), (jnp.float64(1.0),))
    np.testing.assert_array_equal(np.isnan(np.asarray(dx)), np.arange(len(X)) == 2)
