"""Taylor expansions of states: the chain rule that :class:`~analysis.stats.derive.Derived`
merges and statistics use.

A pytree of states with Jacobian ``J`` (trailing parameter axis ``(P,)``) and Hessian
``H`` (``(P, P)``) is expanded as ``s(d) = s0 + J d + d^T H d / 2``; differentiating a
function of ``s(d)`` at ``d = 0`` (``jax.jacfwd`` / ``jax.hessian``) gives the exact
first and second derivatives of that function of the states (float64).
:func:`value_and_derivatives` differentiates a function of a parameter vector directly,
tracing it once per order. Split out of :mod:`analysis.stats.derive`, which re-exports
every name.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats.merge import merge

__all__ = ["taylor_derivatives", "value_and_derivatives"]


# --- Taylor expansion ---------------------------------------------------------------


def _expanded(values: Any, jacs: Any, hesses: Any, d: Any) -> Any:
    def one(v, j, h=None):
        out = v + j @ d
        if h is not None:
            out = out + 0.5 * jnp.einsum("...ij,i,j->...", h, d, d)
        return out

    if hesses is None:
        return jax.tree_util.tree_map(one, values, jacs)
    return jax.tree_util.tree_map(one, values, jacs, hesses)


def taylor_derivatives(
    fn: Callable[[Any], Any], values: Any, jacs: Any, hesses: Any = None, *, order: int = 1
) -> tuple[Any, Any, Any]:
    """Value, gradient and (``order=2``) Hessian of ``fn(states)`` w.r.t. the parameters.

    ``values``/``jacs``/``hesses`` are matching pytrees (Jacobian leaves have a
    trailing parameter axis ``P``; Hessian leaves ``(P, P)``). Output leaves get
    trailing ``(P,)`` and ``(P, P)`` axes. Exact by the chain rule: the states'
    second-order Taylor polynomial has the same first and second derivatives.
    """
    p = jax.tree_util.tree_leaves(jacs)[0].shape[-1]

    def g(d):
        return fn(_expanded(values, jacs, hesses, d))

    d0 = jnp.zeros(p, dtype=jnp.float64)
    value = fn(jax.tree_util.tree_map(jnp.asarray, values))
    grad = jax.jacfwd(g)(d0)
    hess = jax.hessian(g)(d0) if order >= 2 else None
    return value, grad, hess


@partial(jax.jit, static_argnames=("order",))
def _merge_taylor(va, ja, ha, vb, jb, hb, *, order: int):
    """Merged value, Jacobian and Hessian of two Taylor-expanded state pytrees."""
    value = merge(va, vb)
    if order == 0:
        return value, None, None
    p = jax.tree_util.tree_leaves(ja)[0].shape[-1]

    def g(d):
        return merge(_expanded(va, ja, ha, d), _expanded(vb, jb, hb, d))

    d0 = jnp.zeros(p, dtype=jnp.float64)
    jac = jax.jacfwd(g)(d0)
    hess = jax.jacfwd(jax.jacfwd(g))(d0) if order == 2 else None
    return value, jac, hess


def _to_numpy(tree: Any) -> Any:
    if tree is None:
        return None
    return jax.tree_util.tree_map(lambda a: np.asarray(a, dtype=np.float64), tree)


def _symmetric(h: Any) -> np.ndarray:
    h = np.asarray(h, dtype=np.float64)
    return 0.5 * (h + np.swapaxes(h, -1, -2))


def value_and_derivatives(f: Callable[[Any], Any], t0: Any, *, order: int) -> tuple[Any, Any, Any]:
    """``(f(t0), jacfwd(f)(t0), hessian)`` of a function of a parameter vector ``t0``,
    tracing ``f`` once per derivative order (``jacfwd`` with the value as auxiliary
    output). ``order`` 0 gives ``(value, None, None)``, 1 no Hessian. Used by
    :func:`derive` and by the YAML pipeline's jitted chunk kernel alike."""

    def first(t):
        v = f(t)
        return v, v

    if order == 0:
        return f(t0), None, None
    if order == 1:
        jac, value = jax.jacfwd(first, has_aux=True)(t0)
        return value, jac, None

    def second(t):
        jac, value = jax.jacfwd(first, has_aux=True)(t)
        return jac, (jac, value)

    hess, (jac, value) = jax.jacfwd(second, has_aux=True)(t0)
    return value, jac, hess
