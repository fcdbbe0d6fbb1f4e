"""Linear maps that eager JAX evaluates with numpy: the parameters' packing and the
tangents of :func:`~analysis.stats.derive.differentiable`.

Why: every eager JAX operation compiles a program, or loads it from the persistent
compilation cache, once per shape in each process: ~7 ms each (lowering included) on
these machines, and ``jax.grad`` of a loss of a chunked pass evaluates its backward pass
eagerly, operation by operation. ``stats.differentiable``'s own part of that is linear
with constant coefficients known on the host (the merged Jacobians are numpy arrays),
so it is written here as primitives whose eager evaluation is numpy: a new process's
first gradient pass compiles none of them (benchmarks/bench_own.py, first pass with a
warm cache). Staged (under ``jax.jit``, ``jax.vmap`` or a jitted linearization) they
lower to the same JAX operations as before (:func:`_traced` forms).

* ``pack(leaves)``: the float64 leaves raveled and concatenated, a ``(P,)`` vector
  (``stats._params.ParamSpec.vector``); its transpose :func:`unpack` splits a ``(P,)``
  vector back into the leaves' shapes.
* ``apply(ms, x)``: ``[m @ x for m in ms]``, ``x`` of shape ``(P,)`` and each constant
  ``m`` of shape ``(..., P)``; its transpose ``apply_t(ms, cts) = sum_k m_k^T ct_k``.

Each is linear in its array operands (the ``ms`` are constants: the rules never
differentiate them). Results are float64; sums over ``P`` may round differently from
XLA's in the last bit (numpy's BLAS order), within 1e-15 relative.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive

from analysis._compat.jax import (
    Tracer,
    is_undefined_primal,
    is_zero,
    register_batcher,
    register_jvp,
    register_lowering,
    register_transpose,
    shaped_array,
    zero_cotangent,
)

__all__ = ["apply", "pack"]

_F64 = np.dtype(np.float64)


def _host_primitive(name: str, host: Callable[..., Any], traced: Callable[..., Any],
                    avals: Callable[..., Any]) -> Primitive:
    """A multiple-results primitive: eager ``host`` (numpy in, numpy out, then one
    host-to-device copy per result), abstract ``avals``, lowered and batched as
    ``traced`` (the same map with JAX operations)."""
    prim = Primitive(name)
    prim.multiple_results = True

    def impl(*args: Any, **params: Any) -> list:
        out = host(*(np.asarray(a) for a in args), **params)
        return [jax.device_put(np.asarray(o, dtype=_F64)) for o in out]

    def batch(args: Sequence[Any], dims: Sequence[Any], **params: Any) -> tuple:
        out = jax.vmap(partial(traced, **params), in_axes=tuple(dims))(*args)
        return out, [0] * len(out)

    prim.def_impl(impl)
    prim.def_abstract_eval(
        lambda *args, **params: [shaped_array(s, _F64) for s in avals(*args, **params)])
    register_lowering(prim, traced, multiple_results=True)
    register_batcher(prim, batch)
    return prim


def _zero_to_host(t: Any, shape: tuple[int, ...]) -> Any:
    """A symbolic zero tangent as a numpy constant (``ad.instantiate_zeros`` would run
    an eager JAX operation: a compiled program)."""
    return np.zeros(shape, _F64) if is_zero(t) else t


# -- pack / unpack ---------------------------------------------------------------------


def _pack_host(*leaves: np.ndarray) -> list:
    return [np.concatenate([np.asarray(v, dtype=_F64).reshape(-1) for v in leaves])]


def _pack_traced(*leaves: Any) -> list:
    return [jnp.concatenate([jnp.ravel(jnp.asarray(v, dtype=jnp.float64)) for v in leaves])]


def _unpack_host(x: np.ndarray, *, shapes: tuple[tuple[int, ...], ...]) -> list:
    out, start = [], 0
    for shape in shapes:
        size = math.prod(shape)
        out.append(x[start : start + size].reshape(shape))
        start += size
    return out


def _unpack_traced(x: Any, *, shapes: tuple[tuple[int, ...], ...]) -> list:
    out, start = [], 0
    for shape in shapes:
        size = math.prod(shape)
        out.append(jnp.reshape(x[start : start + size], shape))
        start += size
    return out


_pack_p = _host_primitive("diffcoffea_pack", _pack_host, _pack_traced,
                          lambda *leaves: [(sum(math.prod(v.shape) for v in leaves),)])
_unpack_p = _host_primitive("diffcoffea_unpack", _unpack_host, _unpack_traced,
                            lambda x, *, shapes: list(shapes))


def _pack_jvp(primals: Sequence[Any], tangents: Sequence[Any]) -> tuple:
    tangents = [_zero_to_host(t, np.shape(v)) for v, t in zip(primals, tangents, strict=True)]
    return _pack_p.bind(*primals), _pack_p.bind(*tangents)


def _pack_transpose(cts: Sequence[Any], *leaves: Any) -> list:
    (ct,) = cts
    shapes = tuple(tuple(v.aval.shape) if is_undefined_primal(v) else np.shape(v)
                   for v in leaves)
    if is_zero(ct):
        return [zero_cotangent(v) if is_undefined_primal(v) else None for v in leaves]
    parts = _unpack_p.bind(ct, shapes=shapes)
    return [p if is_undefined_primal(v) else None for v, p in zip(leaves, parts, strict=True)]


def _unpack_jvp(primals: Sequence[Any], tangents: Sequence[Any], *, shapes: Any) -> tuple:
    (x,), (dx,) = primals, tangents
    return _unpack_p.bind(x, shapes=shapes), _unpack_p.bind(_zero_to_host(dx, np.shape(x)),
                                                              shapes=shapes)


def _unpack_transpose(cts: Sequence[Any], x: Any, *, shapes: Any) -> list:
    if all(is_zero(c) for c in cts):
        return [zero_cotangent(x)]
    return _pack_p.bind(*(_zero_to_host(c, s) for c, s in zip(cts, shapes, strict=True)))


register_jvp(_pack_p, _pack_jvp)
register_transpose(_pack_p, _pack_transpose)
register_jvp(_unpack_p, _unpack_jvp)
register_transpose(_unpack_p, _unpack_transpose)


def pack(leaves: Sequence[Any]) -> Any:
    """The leaves (numbers or arrays, JAX values or tracers) raveled, as float64, and
    concatenated: a ``(P,)`` float64 array, with numpy doing the work when eager
    (``ParamSpec.vector``'s map, whose eager jnp form compiled three programs). A traced
    leaf of another dtype (its tangents are not float64) takes the jnp map."""
    if any(isinstance(v, Tracer) and v.dtype != _F64 for v in leaves):
        return _pack_traced(*leaves)[0]
    (out,) = _pack_p.bind(*leaves)
    return out


# -- apply / apply_t -------------------------------------------------------------------


def _apply_host(x: np.ndarray, *ms: np.ndarray) -> list:
    return [np.tensordot(m, x, axes=1) for m in ms]


def _apply_traced(x: Any, *ms: Any) -> list:
    return [jax.lax.dot_general(m, x, (((m.ndim - 1,), (0,)), ((), ()))) for m in ms]


def _apply_t_host(*args: np.ndarray, n: int) -> list:
    cts, ms = args[:n], args[n:]
    out = np.zeros(ms[0].shape[-1], _F64)
    for ct, m in zip(cts, ms, strict=True):
        out += np.tensordot(ct, m, axes=ct.ndim)
    return [out]


def _apply_t_traced(*args: Any, n: int) -> list:
    cts, ms = args[:n], args[n:]
    out = None
    for ct, m in zip(cts, ms, strict=True):
        part = jax.lax.dot_general(ct, m, ((tuple(range(ct.ndim)), tuple(range(ct.ndim))),
                                           ((), ())))
        out = part if out is None else out + part
    return [out]


_apply_p = _host_primitive("diffcoffea_apply", _apply_host, _apply_traced,
                           lambda x, *ms: [m.shape[:-1] for m in ms])
_apply_t_p = _host_primitive("diffcoffea_apply_t", _apply_t_host, _apply_t_traced,
                             lambda *args, n: [(args[n].shape[-1],)])


def _apply_jvp(primals: Sequence[Any], tangents: Sequence[Any]) -> tuple:
    x, *ms = primals
    if any(not is_zero(t) for t in tangents[1:]):
        raise NotImplementedError("_hostlinear.apply: its matrices are constants")
    return (_apply_p.bind(x, *ms),
            _apply_p.bind(_zero_to_host(tangents[0], np.shape(x)), *ms))


def _apply_transpose(cts: Sequence[Any], x: Any, *ms: Any) -> list:
    keep = [(c, m) for c, m in zip(cts, ms, strict=True) if not is_zero(c)]
    if not keep:
        return [zero_cotangent(x)] + [None] * len(ms)
    (out,) = _apply_t_p.bind(*(c for c, _ in keep), *(m for _, m in keep), n=len(keep))
    return [out] + [None] * len(ms)


def _apply_t_jvp(primals: Sequence[Any], tangents: Sequence[Any], *, n: int) -> tuple:
    if any(not is_zero(t) for t in tangents[n:]):
        raise NotImplementedError("_hostlinear.apply: its matrices are constants")
    cts = [_zero_to_host(t, np.shape(c)) for c, t in zip(primals[:n], tangents[:n], strict=True)]
    return (_apply_t_p.bind(*primals, n=n), _apply_t_p.bind(*cts, *primals[n:], n=n))


def _apply_t_transpose(cts: Sequence[Any], *args: Any, n: int) -> list:
    (ct,) = cts
    ms = args[n:]
    if is_zero(ct):
        return [zero_cotangent(a) for a in args[:n]] + [None] * len(ms)
    return list(_apply_p.bind(ct, *ms)) + [None] * len(ms)


register_jvp(_apply_p, _apply_jvp)
register_transpose(_apply_p, _apply_transpose)
register_jvp(_apply_t_p, _apply_t_jvp)
register_transpose(_apply_t_p, _apply_t_transpose)


def apply(ms: Sequence[Any], x: Any) -> list:
    """``[m @ x for m in ms]`` (contracting the last axis of each ``m``, shape
    ``(..., P)``, with ``x``, shape ``(P,)``), linear in ``x``: numpy when eager, where
    the ``ms`` are known; traced ``ms`` (``jax.jit``, or a Hessian's ``jax.jvp`` of
    them) take one ``dot_general`` each."""
    if not ms:
        return []
    if any(isinstance(m, Tracer) for m in ms):
        return _apply_traced(x, *ms)
    return list(_apply_p.bind(x, *ms))
