"""The one-set recursion (:func:`analysis.select._recursions.dense_weights`) by compiled
kernels on CPU, with every derivative, through JAX's public extension points.

Under ``jax.jacfwd`` the dense recursion's JAX program pushes each tangent through both
scans over the ``(M, block)`` tables of every block (M: the chunk's largest
multiplicity, for every event). Here the numba kernels of
:mod:`analysis.select.singlekernels` run instead, as XLA FFI calls
(``jax.ffi.ffi_call``) over each event's own objects:

* ``primal``: ``(w, P)`` of ``(q, f)``;
* ``tangent``: the forward-mode tangents along ``B`` lanes of ``(dq, df)`` (linear in
  them), so that ``jax.jacfwd``'s parameters are one kernel call;
* ``cotangent``: its transpose, the pull-back of ``B`` lanes of cotangents.

How they reach JAX:

* :func:`fast_weights` is a ``jax.custom_jvp`` whose tangent is a
  ``jax.custom_derivatives.linear_call`` of ``tangent`` with ``cotangent`` as its
  transpose: forward mode calls the tangent kernel, reverse mode (``jax.grad``,
  ``jax.vjp``, ``jax.jacrev``, under ``jax.checkpoint`` or in a ``lax.scan``) the
  cotangent kernel; :func:`analysis._compat.jax.linear_call_rules` gives ``linear_call`` the
  batching and second-order rules JAX lacks;
* every kernel call is a ``jax.custom_batching.custom_vmap``: a batch of tangents or
  cotangents (``jax.jacfwd``'s and ``jax.jacrev``'s lanes) joins the kernel's lanes, one
  call; a batch of ``q`` or ``f`` (a ``jax.vmap`` of the values) runs the dense
  recursion, vmapped;
* every kernel call is also a ``jax.custom_jvp`` whose derivatives in ``(q, f)`` are
  JAX's derivatives of the dense recursion (second order: ``jax.hessian``, forward over
  forward, reverse over forward; exact, slower), and in the lanes the kernels again;
* ``jax.lax.platform_dependent``: on any platform but the CPU the dense recursion
  (where the CPU is JAX's only backend in the process, the CPU call alone: JAX traces
  every branch of ``platform_dependent``, and the dense recursion's is the costly one).

Values and derivatives agree with the dense recursion to rounding (the same products and
sums per event, in the same order for the values).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial
from typing import Any

import jax
import jax.extend.backend
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.custom_derivatives import SymbolicZero, linear_call

from analysis._compat.jax import linear_call_rules as installed
from analysis.select import singlekernels as kernels
from analysis.select._recursions import dense_weights

__all__ = ["available", "fast_weights"]

_F64 = jnp.float64


def available() -> bool:
    """True when this process can use the kernels.

    Returns
    -------
    bool
        JAX can register the kernels with XLA (each is made on first use:
        :func:`analysis.select.singlekernels.target`) and ``linear_call`` composes with
        ``jax.vmap`` (:func:`analysis._compat.jax.linear_call_rules`); otherwise the
        callers run the dense recursion.
    """
    return kernels.register() and installed()


def fast_weights(values: Any, offsets: Any, event: Any, f: Any, *,
                 max_objects: int) -> tuple[Any, Any]:
    """:func:`analysis.select._recursions.dense_weights` by the kernels.

    Parameters
    ----------
    values, offsets, event, f, max_objects
        As :func:`~analysis.select._recursions.dense_weights`.

    Returns
    -------
    tuple
        ``(objects (N,), events (E,))``, the same results.
    """
    w, p = _calls(max_objects).weights(values, f, offsets, event)
    return w, p


# -- references: the dense recursion, its JVP and VJP over lanes -------------------------------

def _dense(q, f, off, ev, *, m):  # noqa: ANN001, ANN202
    return dense_weights(q, off, ev, f, max_objects=m)


def _tangent_ref(q, f, off, ev, dq, df, *, m):  # noqa: ANN001, ANN202
    fn = partial(_dense, off=off, ev=ev, m=m)
    return jax.vmap(lambda a, b: jax.jvp(fn, (q, f), (a, b))[1])(dq, df)


def _cotangent_ref(q, f, off, ev, cw, cp, *, m):  # noqa: ANN001, ANN202
    fn = partial(_dense, off=off, ev=ev, m=m)
    _, pull = jax.vjp(fn, q, f)
    return jax.vmap(lambda a, b: pull((a, b)))(cw, cp)


# -- the kernels as FFI calls (the dense recursion off the CPU) --------------------------------

def _sds(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, _F64)


def _primal_cpu(q, f, off, ev):  # noqa: ANN001, ANN202
    # traced for the CPU: the handler exists (made now, on first use) before it runs
    name = kernels.target("primal", f.shape[0])
    call = jax.ffi.ffi_call(name, (_sds(*q.shape), _sds(off.shape[0] - 1)))
    return tuple(call(q, f, off.astype(jnp.int64)))


def _tangent_cpu(q, f, off, ev, dq, df):  # noqa: ANN001, ANN202
    b = dq.shape[0]
    name = kernels.target("tangent", f.shape[0], b)
    call = jax.ffi.ffi_call(name, (_sds(b, q.shape[0]), _sds(b, off.shape[0] - 1)))
    return tuple(call(q, f, off.astype(jnp.int64), dq, df))


def _cotangent_cpu(q, f, off, ev, cw, cp):  # noqa: ANN001, ANN202
    b = cw.shape[0]
    name = kernels.target("cotangent", f.shape[0], b)
    call = jax.ffi.ffi_call(name, (_sds(b, q.shape[0]), _sds(b, f.shape[0])))
    return tuple(call(q, f, off.astype(jnp.int64), cw, cp))


def _cpu_only() -> bool:
    """True when the CPU is the only backend JAX started in this process: every program
    of it is lowered for the CPU."""
    return set(jax.extend.backend.backends()) == {"cpu"}


def _on_cpu(cpu: Callable[..., Any], ref: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args):  # noqa: ANN002, ANN202
        if _cpu_only():
            # platform_dependent traces every branch (and differentiates and batches
            # it): the dense recursion's scans were most of a first pass's tracing
            # (0.9 of 1.6 s of an own processor's first gradient pass, 10k chunks)
            return tuple(cpu(*args))
        return jax.lax.platform_dependent(*args, cpu=cpu, default=lambda *a: tuple(ref(*a)))

    return call


# -- batching: lanes join the kernel's lanes, a batch of values the dense recursion -----------

def _batched_ref(ref: Callable[..., Any], in_batched: Any, *args: Any) -> Any:
    axes = tuple(0 if b else None for b in in_batched)
    out = jax.vmap(ref, in_axes=axes)(*args)
    return tuple(out), (True,) * len(out)


def _primal_vmap(call: Callable[..., Any], ref: Callable[..., Any]) -> Any:
    fn = custom_vmap(call)

    @fn.def_vmap
    def rule(axis_size, in_batched, *args):  # noqa: ANN001, ANN002, ANN202
        del axis_size
        return _batched_ref(ref, in_batched, *args)

    return fn


def _lanes_vmap(call: Callable[..., Any], ref: Callable[..., Any]) -> Any:
    fn = custom_vmap(call)

    @fn.def_vmap
    def rule(axis_size, in_batched, q, f, off, ev, a, b):  # noqa: ANN001, ANN202
        if any(in_batched[:4]):
            return _batched_ref(ref, in_batched, q, f, off, ev, a, b)
        # (V, B, K) -> (V * B, K): jax.jacfwd's (jax.jacrev's) lanes, one kernel call
        lanes = []
        for x, batched in zip((a, b), in_batched[4:]):
            x = x if batched else jnp.broadcast_to(x, (axis_size,) + x.shape)
            lanes.append(x.reshape((-1,) + x.shape[2:]))
        out = fn(q, f, off, ev, *lanes)
        return tuple(o.reshape((axis_size, -1) + o.shape[1:]) for o in out), (True, True)

    return fn


# -- derivatives --------------------------------------------------------------------------------

def _value(t: Any, like: Any) -> Any:
    return jnp.zeros(like.shape, like.dtype) if isinstance(t, SymbolicZero) else t


def _moving(*tangents: Any) -> bool:
    return not all(isinstance(t, SymbolicZero) for t in tangents)


def _linear(fn, transpose, residuals, lanes, sizes):  # noqa: ANN001, ANN202
    """``fn(*residuals, *lanes)`` as a ``linear_call`` in the lanes that are not
    ``None`` (zeros of ``(B, size)`` inside: a constant is no linear argument), with
    ``transpose`` (the same signature) as its transpose."""
    moving = tuple(x is not None for x in lanes)
    n_lanes = next(x.shape[0] for x in lanes if x is not None)

    def full(given):  # noqa: ANN001, ANN202
        it = iter(given)
        return [next(it) if m else jnp.zeros((n_lanes, size), _F64)
                for m, size in zip(moving, sizes)]

    def call(r, lin):  # noqa: ANN001, ANN202
        return fn(*r, *full(lin))

    def call_t(r, cts):  # noqa: ANN001, ANN202
        back = transpose(*r, *cts)
        return tuple(x for x, m in zip(back, moving) if m)

    return linear_call(call, call_t, residuals,
                       tuple(x for x in lanes if x is not None))


class _Calls:
    """The kernel calls for one ``max_objects`` (the dense recursion's static size)."""

    def __init__(self, m: int) -> None:
        primal_ref = partial(_dense, m=m)
        tangent_ref = partial(_tangent_ref, m=m)
        cotangent_ref = partial(_cotangent_ref, m=m)
        primal = _primal_vmap(_on_cpu(_primal_cpu, primal_ref), primal_ref)
        tangent_lanes = _lanes_vmap(_on_cpu(_tangent_cpu, tangent_ref), tangent_ref)
        cotangent_lanes = _lanes_vmap(_on_cpu(_cotangent_cpu, cotangent_ref), cotangent_ref)

        self.weights = jax.custom_jvp(lambda q, f, off, ev: primal(q, f, off, ev))
        self.tangent = jax.custom_jvp(tangent_lanes)
        self.cotangent = jax.custom_jvp(cotangent_lanes)
        self.weights.defjvp(self._weights_jvp, symbolic_zeros=True)
        self.tangent.defjvp(self._lanes_jvp(self.tangent, self.linear_tangent, tangent_ref),
                            symbolic_zeros=True)
        self.cotangent.defjvp(self._lanes_jvp(self.cotangent, self.linear_cotangent,
                                              cotangent_ref), symbolic_zeros=True)

    def linear_tangent(self, q, f, off, ev, dq, df):  # noqa: ANN001, ANN201
        """The tangent kernel, linear in ``(dq, df)`` (``None``: zero), the cotangent
        kernel its transpose."""
        return _linear(self.tangent, self.cotangent, (q, f, off, ev), (dq, df),
                       (q.shape[0], f.shape[0]))

    def linear_cotangent(self, q, f, off, ev, cw, cp):  # noqa: ANN001, ANN201
        """The cotangent kernel, linear in ``(cw, cp)`` (``None``: zero), the tangent
        kernel its transpose."""
        return _linear(self.cotangent, self.tangent, (q, f, off, ev), (cw, cp),
                       (q.shape[0], off.shape[0] - 1))

    def _weights_jvp(self, primals, tangents):  # noqa: ANN001, ANN202
        q, f, off, ev = primals
        dq, df = tangents[:2]
        out = self.weights(q, f, off, ev)
        if not _moving(dq, df):
            return out, tuple(jnp.zeros_like(x) for x in out)
        dw, dp = self.linear_tangent(q, f, off, ev, *(None if isinstance(t, SymbolicZero)
                                                      else t[None] for t in (dq, df)))
        return out, (dw[0], dp[0])

    @staticmethod
    def _lanes_jvp(fn, linear, ref):  # noqa: ANN001, ANN205
        """JVP of a lanes kernel: linear in its lanes (the kernel, transposable), the rest by
        JAX's derivative of the dense reference."""

        def rule(primals, tangents):  # noqa: ANN001, ANN202
            q, f, off, ev, a, b = primals
            dq, df, _, _, da, db = tangents
            out = fn(*primals)
            parts = []
            if _moving(da, db):
                parts.append(linear(q, f, off, ev, *(None if isinstance(t, SymbolicZero)
                                                     else t for t in (da, db))))
            if _moving(dq, df):
                def in_values(q, f):  # noqa: ANN001, ANN202
                    return ref(q, f, off, ev, a, b)

                parts.append(jax.jvp(in_values, (q, f), (_value(dq, q), _value(df, f)))[1])
            if not parts:
                return out, tuple(jnp.zeros_like(x) for x in out)
            return out, tuple(parts[0] if len(parts) == 1 else
                              [x + y for x, y in zip(*parts)])

        return rule


@cache
def _calls(max_objects: int) -> _Calls:
    return _Calls(max_objects)

