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

__all__ = [
    "MIN_BLOCK", "TANGENT_BUDGET", "chunk_elements", "tangent_block", "taylor_derivatives",
    "value_and_derivatives",
]


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


#: The fewest tangents of a block (:func:`tangent_block`): up to this many parameters run
#: in one block whatever the chunk (the common case keeps jacfwd's one program).
MIN_BLOCK = 8
#: Default budget of one block, in tangent-elements: a block's tangents times the largest
#: array of the chunk function (:func:`chunk_elements`). Measured on
#: configs/demo_score.yaml (two networks, 1,053 parameters): the largest array is 131k
#: elements at chunks of 1,000 events (524k at 4,000); 2**24 gives 9 blocks of 117
#: tangents there (peak 1.2-1.3 GB; all at once: 6.7 GB) and 33 of 32 at 4,000 (1.4 GB).
TANGENT_BUDGET = 2**24


def tangent_block(n_params: int, elements: int, *, budget: int = TANGENT_BUDGET) -> int:
    """Tangents per block of a forward Jacobian over a chunk.

    Parameters
    ----------
    n_params
        The number of parameters ``P`` (basis tangents).
    elements
        The chunk's size: its largest array's number of elements
        (:func:`chunk_elements`).
    budget
        Block tangents times ``elements`` stay under it, but a block holds at least
        ``min(P, MIN_BLOCK)`` tangents.

    Returns
    -------
    int
        Between ``min(P, MIN_BLOCK)`` and ``P`` (``P``: one block, ``jax.jacfwd``).
    """
    fit = budget // max(int(elements), 1)
    return max(min(n_params, MIN_BLOCK), min(n_params, fit))


def _largest(jaxpr: Any) -> int:
    """Elements of the largest value an equation of ``jaxpr`` (a ``jax.extend.core.Jaxpr``)
    or of the jaxprs in its parameters (jit, scan, cond bodies) makes."""
    best = 0
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            best = max(best, int(np.prod(getattr(v.aval, "shape", ()))))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's Jaxpr
                if hasattr(inner, "eqns"):
                    best = max(best, _largest(inner))
    return best


def chunk_elements(f: Callable[[Any], Any], t0: Any) -> int:
    """The size (elements) of the largest array ``f`` reads or makes on its chunk: its
    columns (closed over), its count states (events x states), a network's hidden units
    (objects x width); one trace of ``f``, no computation. A tangent of ``f`` holds
    arrays of about this size."""
    closed = jax.make_jaxpr(f)(t0)
    read = max((int(np.prod(np.shape(c))) for c in closed.consts), default=1)
    return max(read, _largest(closed.jaxpr))


def _jacfwd_blocks(fun: Callable[[Any], Any], t0: Any, block: int) -> tuple[Any, Any]:
    """``jax.jacfwd(fun, has_aux=True)(t0)`` with the basis tangents in blocks of at most
    ``block``: each block is ``jax.jvp`` under ``jax.vmap`` (what jacfwd does with all
    of them), the blocks a ``lax.map``, so XLA holds one block's intermediates at a time.
    ``block >= P``: jacfwd itself (one block, the same program)."""
    p = t0.shape[0]
    if block >= p:
        return jax.jacfwd(fun, has_aux=True)(t0)
    n = -(-p // block)
    size = -(-p // n)  # n blocks of equal size: the fewest padding tangents (zeros)
    basis = jnp.eye(n * size, p, dtype=t0.dtype).reshape(n, size, p)

    def push(v):
        return jax.jvp(fun, (t0,), (v,), has_aux=True)

    def one_block(vs):
        # the primal and aux do not depend on the tangent: computed once per block
        _, tangent, aux = jax.vmap(push, out_axes=(None, 0, None))(vs)
        return tangent, aux

    tangents, aux = jax.lax.map(one_block, basis)

    def to_jac(t):
        t = t.reshape((n * size,) + t.shape[2:])[:p]
        return jnp.moveaxis(t, 0, -1)

    return (jax.tree_util.tree_map(to_jac, tangents),
            jax.tree_util.tree_map(lambda a: a[0], aux))


def value_and_derivatives(f: Callable[[Any], Any], t0: Any, *, order: int,
                          block: int | None = None,
                          budget: int = TANGENT_BUDGET) -> tuple[Any, Any, Any]:
    """Value, forward Jacobian and (``order=2``) Hessian of a function of a parameter
    vector, tracing ``f`` once per derivative order.

    Parameters
    ----------
    f
        ``f(t) -> pytree`` of float64 arrays (one chunk's states).
    t0
        The parameter vector ``(P,)``.
    order
        0: ``(value, None, None)``; 1: no Hessian; 2: with it.
    block
        Keyword-only: tangents per block (``jax.jvp`` under ``jax.vmap``, blocks in
        sequence, so memory grows with the block, not with ``P``); ``>= P``: one block,
        ``jax.jacfwd``'s program. None: :func:`tangent_block` of the largest array ``f``
        reads or makes (:func:`chunk_elements`; only traced when ``P > MIN_BLOCK``).
        Order 2 blocks both levels (a block's second-order tangents: ``block**2``).
    budget
        Keyword-only: :func:`tangent_block`'s budget when ``block`` is None.

    Returns
    -------
    tuple
        ``(f(t0), jacobian, hessian)``: the Jacobian's leaves with a trailing ``(P,)``
        axis, the Hessian's ``(P, P)``; equal to ``jax.jacfwd`` (and ``jax.hessian``
        as forward over forward) whatever the block. Used by :func:`derive` and by
        the YAML pipeline's jitted chunk kernel alike.
    """

    def first(t):
        v = f(t)
        return v, v

    if order == 0:
        return f(t0), None, None
    p = t0.shape[0]
    if block is None:
        block = p if p <= MIN_BLOCK else tangent_block(p, chunk_elements(f, t0), budget=budget)
    if order == 1:
        jac, value = _jacfwd_blocks(first, t0, block)
        return value, jac, None

    def second(t):
        jac, value = _jacfwd_blocks(first, t, block)
        return jac, (jac, value)

    hess, (jac, value) = _jacfwd_blocks(second, t0, block)
    return value, jac, hess
