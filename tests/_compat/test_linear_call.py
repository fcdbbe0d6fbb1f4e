"""analysis._compat.jax.linear_call_rules: the batching and second-order rules that
``jax.custom_derivatives.linear_call`` lacks.

A linear function with its own transpose (``y = c(r) * x``, ``c = cos``), as
:mod:`analysis.select.singlecall` builds its kernels' tangents, under every transform
against the same function written in plain JAX. Fails when JAX moves what the rules use
(``installed()`` false on the pinned JAX) or when a rule is wrong.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import linear_call

from analysis._compat.jax import linear_call_rules as installed


def _tangent(r, x):  # noqa: ANN001, ANN202
    (q,), (dq,) = r, x
    return (jnp.cos(q) * dq,)


def _transpose(r, ct):  # noqa: ANN001, ANN202
    (q,), (c,) = r, ct
    return (jnp.cos(q) * c,)


def _make_sin(transpose):  # noqa: ANN001, ANN202
    """``sin`` whose JVP is a ``linear_call`` of :func:`_tangent` with ``transpose``."""

    @jax.custom_jvp
    def sin(q):  # noqa: ANN001, ANN202
        return jnp.sin(q)

    @sin.defjvp
    def _jvp(primals, tangents):  # noqa: ANN001, ANN202
        (q,), (dq,) = primals, tangents
        return sin(q), linear_call(_tangent, transpose, (q,), (dq,))[0]

    return sin


_sin = _make_sin(_transpose)


def test_rules_are_installed_on_this_jax() -> None:
    assert installed()


def test_linear_call_under_every_transform() -> None:
    assert installed()
    x = jnp.linspace(-1.0, 2.0, 5)

    def loss(fn):  # noqa: ANN001, ANN202
        return lambda x: jnp.sum(fn(x) ** 3 * jnp.exp(x))

    transforms = {
        "jacfwd": jax.jacfwd, "jacrev": jax.jacrev, "vmap": jax.vmap,
        "grad": lambda fn: jax.grad(loss(fn)),
        "hessian": lambda fn: jax.hessian(loss(fn)),
        "jacfwd o jacfwd": lambda fn: jax.jacfwd(jax.jacfwd(loss(fn))),
        "jacrev o grad": lambda fn: jax.jacrev(jax.grad(loss(fn))),
        "jacrev o jacfwd": lambda fn: jax.jacrev(jax.jacfwd(fn)),
        "vmap o jacrev (batched residual)": lambda fn: jax.vmap(jax.jacrev(fn)),
    }
    for name, transform in transforms.items():
        arg = jnp.stack([x, 2.0 * x]) if name.startswith("vmap o") else x
        got = jax.jit(transform(_sin))(arg)
        want = transform(jnp.sin)(arg)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14, err_msg=name)


def test_a_forward_pass_never_traces_the_transpose() -> None:
    """Under ``jax.jacfwd`` (a batched JVP) the transpose is not traced: the own
    processors' cotangent kernel is compiled when its call is first traced
    (analysis.select.singlecall), so a forward-only pass must not trace it; reverse
    mode over the same batch still does."""
    assert installed()
    # a function of its own, not _sin: JAX caches traced jaxprs by function, so a
    # transpose another test traced already would not be traced (counted) here again
    traced: list[int] = []

    def transpose(r, ct):  # noqa: ANN001, ANN202
        traced.append(1)
        return _transpose(r, ct)

    sin = _make_sin(transpose)
    x = jnp.linspace(-1.0, 2.0, 5)
    np.testing.assert_allclose(jax.jacfwd(sin)(x), jnp.diag(jnp.cos(x)), rtol=1e-15)
    assert not traced
    # reverse mode over the batch: the batched linear_call's transpose, traced now
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(jax.vmap(sin)(x)))(x), jnp.cos(x),
                               rtol=1e-15)
    assert traced
