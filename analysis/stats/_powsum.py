"""``power_sums(v, d, order)``: the sums ``sum_n v[..., n] * d[n]**k``, ``k = 0..order``, in one pass.

This is the inner loop of every centred moment (``v`` the weights, ``d`` the
deviations from a constant centre), written as one JAX primitive because of how XLA
on CPU compiles the alternatives:

* separate ``jnp.sum(w * d**k)`` are separate loops, each over materialised
  operands; under ``jax.jacfwd`` each tangent sum becomes a loop over a materialised
  ``(P, N)`` array (P parameters): the moments then cost several times the weights;
* ``lax.reduce`` with several operands is one fused loop (the weights' tangents,
  too, are computed inside it and never stored), but JAX cannot transpose it, so
  ``jax.grad`` and ``jax.hessian`` would fail;
* a matrix product ``dW @ [1, d, d^2, ...]`` needs the ``(N, order + 1)`` matrix in
  memory, and is slower than the fused loop.

The primitive lowers to the fused ``lax.reduce`` and declares the rest itself: it is
linear in ``v`` (transpose ``v_bar[n] = sum_k ct[k] d[n]**k``, Horner), its derivative
in ``d`` is ``k sum v dd d**(k - 1)`` (the same primitive on ``v * dd`` with order
``order - 1``), and it batches by moving batch axes to the front of ``v`` (so
``jax.jacfwd``'s P tangents are one pass with P rows). Sums are float64 when the
inputs are, summed in blocks (numpy's precision, not one accumulator's); empty input
(``N = 0``) gives zeros.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive

from analysis._compat.jax import (
    is_undefined_primal,
    is_zero,
    register_batcher,
    register_jvp,
    register_lowering,
    register_transpose,
    shaped_array,
    zero,
)

Array = jax.Array

__all__ = ["power_sums"]

power_sums_p = Primitive("diffcoffea_power_sums")


def power_sums(v: Any, d: Any, order: int) -> Array:
    """``out[..., k] = sum_n v[..., n] * d[n]**k`` for ``k = 0..order`` (shape ``(..., order + 1)``).

    ``v``: ``(..., N)``; ``d``: ``(N,)`` (shared by every row of ``v``) or ``v``'s
    shape. Differentiable in both (any order of ``jvp``/``vjp``/``vmap``); the powers
    are built by repeated multiplication, never ``**``.
    """
    v = jnp.asarray(v)
    d = jnp.asarray(d)
    _check_shapes(tuple(v.shape), tuple(d.shape))
    if int(order) < 0:
        raise ValueError(f"power_sums: order: expected an integer >= 0, found {order}")
    dtype = jnp.result_type(v, d)
    return power_sums_p.bind(v.astype(dtype), d.astype(dtype), order=int(order))


def _check_shapes(v_shape: tuple[int, ...], d_shape: tuple[int, ...]) -> None:
    if len(v_shape) < 1 or not (
        d_shape == v_shape or (len(d_shape) == 1 and d_shape[0] == v_shape[-1])
    ):
        raise ValueError(
            f"power_sums: expected d of shape (N,) or v's shape, found v {v_shape}, d {d_shape}"
        )


def _abstract_eval(v: Any, d: Any, *, order: int) -> Any:
    _check_shapes(tuple(v.shape), tuple(d.shape))
    return shaped_array(tuple(v.shape[:-1]) + (order + 1,), v.dtype)


# Elements per block: each block is summed in one accumulator, then the block sums
# are added. One accumulator over 4M elements loses ~1e-13 relative (1e-11 when the
# terms cancel); blocks of 256 keep the sums at numpy's pairwise precision (~1e-16)
# at the same speed.
_BLOCK = 256


def _add(a: tuple[Array, ...], b: tuple[Array, ...]) -> tuple[Array, ...]:
    return tuple(x + y for x, y in zip(a, b))


def _reduce_last(terms: list[Array]) -> list[Array]:
    """One ``lax.reduce`` of all ``terms`` over their last axis (XLA fuses the producers
    of the terms into it, so e.g. tangents of the weights are never stored)."""
    zeros = tuple(jnp.zeros((), t.dtype) for t in terms)
    return list(lax.reduce(tuple(terms), zeros, _add, (terms[0].ndim - 1,)))


def _impl(v: Array, d: Array, *, order: int) -> Array:
    terms = [v]
    for _ in range(order):
        terms.append(terms[-1] * d)
    n = v.shape[-1]
    m = n // _BLOCK * _BLOCK
    # Blocks and tail are cut from the products, not from v and d: d is often the
    # caller's constant data inside jit, and XLA would fold slices of it into new
    # constants at compile time (seconds for millions of elements).
    sums = _reduce_last([t[..., m:] for t in terms])  # the tail (< _BLOCK elements)
    if m:
        blocks = _reduce_last(
            [t[..., :m].reshape(v.shape[:-1] + (m // _BLOCK, _BLOCK)) for t in terms]
        )
        sums = [jnp.sum(b, axis=-1) + t for b, t in zip(blocks, sums)]
    # The barrier keeps every power in the compiled loop even where the caller uses
    # only some (mean and var need two): otherwise XLA prunes each call's loop
    # differently, and mean, var, skew and kurtosis of the same data become four
    # loops instead of one that common-subexpression elimination shares.
    return lax.optimization_barrier(jnp.stack(sums, axis=-1))


def _jvp(primals: tuple[Any, Any], tangents: tuple[Any, Any], *, order: int) -> tuple[Any, Any]:
    v, d = primals
    tv, td = tangents
    out = power_sums_p.bind(v, d, order=order)
    t = None
    if not is_zero(tv):
        t = power_sums_p.bind(tv, d, order=order)
    if not is_zero(td) and order > 0:
        # d/dd sum v d^k = k sum v dd d^(k - 1)
        u = power_sums_p.bind(v * td, d, order=order - 1)
        k = jnp.arange(1, order + 1, dtype=u.dtype)
        shifted = jnp.concatenate([jnp.zeros_like(u[..., :1]), u * k], axis=-1)
        t = shifted if t is None else t + shifted
    if t is None:
        t = jnp.zeros_like(out)
    return out, t


def _transpose(ct: Any, v: Any, d: Any, *, order: int) -> list[Any]:
    if is_undefined_primal(d):
        raise NotImplementedError("power_sums is linear in v only, not in d")
    shape = v.aval.shape
    if is_zero(ct):
        return [zero(v.aval), None]
    acc = ct[..., order, None]
    for k in range(order - 1, -1, -1):
        acc = acc * d + ct[..., k, None]
    return [jnp.broadcast_to(acc, shape), None]


def _batch(args: tuple[Any, Any], dims: tuple[Any, Any], *, order: int) -> tuple[Array, int]:
    v, d = args
    bv, bd = dims
    if bd is None:
        v = jnp.moveaxis(v, bv, 0)
        if d.ndim > 1:  # one d per row of the unbatched v: the same for every batch entry
            d = jnp.broadcast_to(d, v.shape)
        return power_sums_p.bind(v, d, order=order), 0
    d = jnp.moveaxis(d, bd, 0)
    v = jnp.broadcast_to(v, (d.shape[0],) + v.shape) if bv is None else jnp.moveaxis(v, bv, 0)
    # d is (B, N) or (B, ..., N): give it v's full shape
    d = d.reshape(d.shape[:1] + (1,) * (v.ndim - d.ndim) + d.shape[1:])
    return power_sums_p.bind(v, jnp.broadcast_to(d, v.shape), order=order), 0


power_sums_p.def_impl(_impl)
power_sums_p.def_abstract_eval(_abstract_eval)
register_lowering(power_sums_p, _impl, multiple_results=False)
register_jvp(power_sums_p, _jvp)
register_transpose(power_sums_p, _transpose)
register_batcher(power_sums_p, _batch)
