"""analysis.stats._hostlinear: the parameters' packing and the constant-matrix tangents
that eager JAX evaluates with numpy, against the same maps written with jnp (values,
jvp, grad, jit, vmap, second derivatives)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis.stats._hostlinear import apply, pack

RNG = np.random.default_rng(7)
MS = [RNG.normal(size=(3,)), RNG.normal(size=(2, 3)), RNG.normal(size=(2, 2, 3))]
LEAVES = {"a": 1.5, "b": np.array([2.0, -1.0]), "c": np.array([[0.5], [3.0]])}


def _pack_ref(leaves):
    return jnp.concatenate([jnp.ravel(jnp.asarray(v, dtype=jnp.float64)) for v in leaves])


def _apply_ref(ms, x):
    return [jnp.tensordot(jnp.asarray(m), x, axes=1) for m in ms]


def _loss(pack_fn, apply_fn):
    """A nonlinear scalar of the packed leaves through the maps (both linear)."""
    def loss(theta):
        x = pack_fn(jax.tree_util.tree_leaves(theta))[:3] * jnp.array([1.0, 2.0, 0.5])
        outs = apply_fn(MS, x)
        return sum(jnp.sum(jnp.sin(o) * (k + 1)) for k, o in enumerate(outs)) + jnp.sum(x**3)

    return loss


OURS, REF = _loss(pack, apply), _loss(_pack_ref, _apply_ref)


def _close(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-14, atol=1e-14)


def test_values_are_numpys():
    leaves = jax.tree_util.tree_leaves(LEAVES)
    packed = pack(leaves)
    assert packed.dtype == jnp.float64 and packed.shape == (5,)
    np.testing.assert_array_equal(np.asarray(packed), [1.5, 2.0, -1.0, 0.5, 3.0])
    x = np.array([0.3, -0.7, 1.1])
    for got, m in zip(apply(MS, x), MS, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.tensordot(m, x, axes=1), rtol=1e-15)


@pytest.mark.parametrize("transform", ["grad", "jit_grad", "jvp", "hessian", "vmap_grad",
                                       "jit_linearized", "jacrev_jacfwd"])
def test_derivatives_equal_the_jnp_maps(transform):
    theta = jax.tree_util.tree_map(jnp.asarray, LEAVES)
    tangent = jax.tree_util.tree_map(lambda v: jnp.ones_like(v) * 0.3, theta)
    if transform == "grad":
        _close(jax.value_and_grad(OURS)(theta), jax.value_and_grad(REF)(theta))
    elif transform == "jit_grad":
        _close(jax.jit(jax.grad(OURS))(theta), jax.grad(REF)(theta))
    elif transform == "jvp":
        _close(jax.jvp(OURS, (theta,), (tangent,)), jax.jvp(REF, (theta,), (tangent,)))
    elif transform == "hessian":
        _close(jax.hessian(OURS)(theta), jax.hessian(REF)(theta))
    elif transform == "jacrev_jacfwd":
        _close(jax.jacrev(jax.jacfwd(OURS))(theta), jax.hessian(REF)(theta))
    elif transform == "vmap_grad":
        batch = jax.tree_util.tree_map(lambda v: jnp.stack([v, v * 2.0, -v]), theta)
        _close(jax.vmap(jax.grad(OURS))(batch), jax.vmap(jax.grad(REF))(batch))
    else:
        lin = jax.linearize(OURS, theta)[1]
        _close(jax.jit(lin)(tangent), jax.linearize(REF, theta)[1](tangent))


def test_matrices_are_constants_of_the_primitive_and_traced_ones_take_the_jnp_map():
    from analysis.stats._hostlinear import _apply_p

    with pytest.raises(NotImplementedError, match="constants"):
        jax.jvp(lambda m: _apply_p.bind(jnp.ones(3), m)[0], (jnp.ones(3),), (jnp.ones(3),))
    # apply itself differentiates in traced matrices (jax.hessian of stats.differentiable)
    x, m, dm = jnp.array([0.3, -0.7, 1.1]), jnp.array(MS[1]), jnp.ones((2, 3))
    _close(jax.jvp(lambda m: apply([m], x)[0], (m,), (dm,)),
           jax.jvp(lambda m: _apply_ref([m], x)[0], (m,), (dm,)))
