"""The one-set recursion (:func:`analysis.select._single.dense_weights`) by compiled
kernels on CPU, with every derivative.

Under ``jax.jacfwd`` the dense recursion's JAX program pushes each tangent through both
scans over the ``(M, block)`` tables of every block (M: the chunk's largest
multiplicity, for every event); measured on the README processor's 50k-event chunks,
about two thirds of a later pass. Here four JAX primitives run the numba kernels of
:mod:`analysis.select._fastsingle_kernels` (XLA FFI custom calls, over each event's own
objects):

* ``primal``: ``(w, P)`` of ``(q, f)``;
* ``tangent``: the forward-mode tangents along ``B`` lanes of ``(dq, df)`` (linear in
  them), so ``jax.jacfwd``'s parameters are one kernel call;
* ``cotangent``: its transpose, the reverse-mode pull-back of ``B`` lanes of
  cotangents (``jax.grad``, ``jax.vjp``, ``jax.jacrev``);
* ``jvp``: ``primal`` and ``tangent`` in one call (the tangent kernel writes the values
  too), the JVP of ``primal``; where reverse mode linearizes it (partial evaluation) it
  splits into ``primal`` (known) and ``tangent`` (staged).

``primal``'s JVP is ``jvp``; ``tangent`` and ``cotangent`` transpose into one
another. Their derivatives with respect to ``(q, f)`` (second order: ``jax.hessian``,
forward over reverse) are JAX's derivatives of the dense recursion's own JVP and VJP
(exact, slower), and so is a ``jax.vmap`` over ``q`` or ``f``. On any other platform the
primitives lower to the dense recursion (the same definitions). Values and
derivatives agree with the dense recursion to rounding (the same products and sums per
event, in the same order for the values).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax.extend import core
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.interpreters import partial_eval as pe

from analysis.select import _fastsingle_kernels as kernels
from analysis.select._single import dense_weights

__all__: list[str] = []

_F64 = jnp.float64


def available() -> bool:
    """True when the kernels are registered with XLA (this process can use them)."""
    return kernels.register()


def fast_weights(values, offsets, event, f, *, max_objects: int):
    """:func:`analysis.select._single.dense_weights` by the kernels (same signature,
    same results)."""
    w, p = _primal_p.bind(values, f, offsets, event, max_objects=max_objects)
    return w, p


# -- references: the dense recursion, its JVP and VJP over lanes -------------------------------

def _dense(q, f, off, ev, *, max_objects):
    return dense_weights(q, off, ev, f, max_objects=max_objects)


def _tangent_ref(q, f, off, ev, dq, df, *, max_objects):
    fn = partial(_dense, off=off, ev=ev, max_objects=max_objects)
    return jax.vmap(lambda a, b: jax.jvp(fn, (q, f), (a, b))[1])(dq, df)


def _cotangent_ref(q, f, off, ev, cw, cp, *, max_objects):
    fn = partial(_dense, off=off, ev=ev, max_objects=max_objects)
    _, pull = jax.vjp(fn, q, f)
    return jax.vmap(lambda a, b: pull((a, b)))(cw, cp)


# -- the kernels as FFI calls -----------------------------------------------------------------

def _sds(shape) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, _F64)


def _primal_cpu(q, f, off, ev, *, max_objects):
    kernels.register()  # lowered for the CPU: the handlers exist before it runs
    del ev, max_objects
    call = jax.ffi.ffi_call(kernels.PRIMAL, (_sds(q.shape), _sds((off.shape[0] - 1,))))
    return call(q, f, off.astype(jnp.int64))


def _tangent_cpu(q, f, off, ev, dq, df, *, max_objects):
    kernels.register()  # lowered for the CPU: the handlers exist before it runs
    del ev, max_objects
    b = dq.shape[0]
    call = jax.ffi.ffi_call(kernels.TANGENT, (_sds((b, q.shape[0])), _sds((b, off.shape[0] - 1))))
    return call(q, f, off.astype(jnp.int64), dq, df)


def _jvp_cpu(q, f, off, ev, dq, df, *, max_objects):
    # the tangent kernel with two more results: it writes the values too
    kernels.register()
    del ev, max_objects
    b, e = dq.shape[0], off.shape[0] - 1
    call = jax.ffi.ffi_call(kernels.TANGENT,
                            (_sds((b, q.shape[0])), _sds((b, e)), _sds(q.shape), _sds((e,))))
    dw, dp, w, p = call(q, f, off.astype(jnp.int64), dq, df)
    return w, p, dw, dp


def _jvp_ref(q, f, off, ev, dq, df, *, max_objects):
    return (*_dense(q, f, off, ev, max_objects=max_objects),
            *_tangent_ref(q, f, off, ev, dq, df, max_objects=max_objects))


def _cotangent_cpu(q, f, off, ev, cw, cp, *, max_objects):
    kernels.register()  # lowered for the CPU: the handlers exist before it runs
    del ev, max_objects
    b = cw.shape[0]
    call = jax.ffi.ffi_call(kernels.COTANGENT, (_sds((b, q.shape[0])), _sds((b, f.shape[0]))))
    return call(q, f, off.astype(jnp.int64), cw, cp)


def _primitive(name: str, cpu, ref, shapes) -> Primitive:
    prim = Primitive(name)
    prim.multiple_results = True

    def impl(*args, **params):
        return jax.jit(lambda *a: prim.bind(*a, **params))(*args)

    prim.def_impl(impl)
    prim.def_abstract_eval(lambda *args, **params: [jax.core.ShapedArray(s, _F64)
                                                   for s in shapes(*args)])
    mlir.register_lowering(prim, mlir.lower_fun(ref, multiple_results=True))
    mlir.register_lowering(prim, mlir.lower_fun(cpu, multiple_results=True), platform="cpu")
    return prim


_primal_p = _primitive("diffcoffea_single_primal", _primal_cpu, _dense,
                       lambda q, f, off, ev: [q.shape, (off.shape[0] - 1,)])
_tangent_p = _primitive("diffcoffea_single_tangent", _tangent_cpu, _tangent_ref,
                        lambda q, f, off, ev, dq, df: [dq.shape, (dq.shape[0], off.shape[0] - 1)])
_cotangent_p = _primitive("diffcoffea_single_cotangent", _cotangent_cpu, _cotangent_ref,
                          lambda q, f, off, ev, cw, cp: [cw.shape, (cw.shape[0], f.shape[0])])
# The JVP in one call (forward mode: jax.jvp, jax.jacfwd): values and tangents by the
# tangent kernel, which computes the values' recursion anyway (measured on the README
# processor's 50k-event chunks: the separate primal kernel was 2.8 of 13-17 ms).
_jvp_p = _primitive("diffcoffea_single_jvp", _jvp_cpu, _jvp_ref,
                    lambda q, f, off, ev, dq, df: [q.shape, (off.shape[0] - 1,), dq.shape,
                                                   (dq.shape[0], off.shape[0] - 1)])


# -- derivatives ------------------------------------------------------------------------------

def _zero(t) -> bool:
    return type(t) is ad.Zero


def _primal_jvp(primals, tangents, *, max_objects):
    """Forward mode: values and tangents in one kernel call (``jvp``)."""
    q, f, off, ev = primals
    dq, df = tangents[:2]
    if _zero(dq) and _zero(df):
        out = _primal_p.bind(q, f, off, ev, max_objects=max_objects)
        return out, [jnp.zeros_like(x) for x in out]
    dq, df = ad.instantiate_zeros(dq), ad.instantiate_zeros(df)
    w, p, dw, dp = _jvp_p.bind(q, f, off, ev, dq[None], df[None], max_objects=max_objects)
    return [w, p], [dw[0], dp[0]]


def _jvp_partial_eval(trace, q, f, off, ev, dq, df, *, max_objects):
    """Partial evaluation of the one-call JVP (reverse mode linearizes the JVP by partial
    evaluation: ``jax.grad``, ``jax.vjp``, ``jax.linearize``): with the values' inputs
    known and the tangents' not, the values are computed now (``primal``) and the
    tangents staged as ``tangent``, which transposes into ``cotangent``, as before the
    one-call JVP."""
    args = (q, f, off, ev, dq, df)
    known = [t.pval.is_known() for t in args]
    params = {"max_objects": max_objects}
    if all(known) or not all(known[:4]):
        return trace.default_process_primitive(_jvp_p, args, params)
    values = _primal_p.bind(*(t.pval.get_known() for t in args[:4]), max_objects=max_objects)
    tangents = trace.default_process_primitive(_tangent_p, args, params)
    return [trace.new_const(v) for v in values] + list(tangents)


def _jvp_partial_eval_custom(saveable, unks_in, inst_in, eqn):
    """The same split for ``jax.checkpoint`` (``pe.partial_eval_jaxpr_custom``): the
    values known (``primal``), the tangents staged (``tangent``); otherwise the whole
    call, known or staged, as JAX does for a primitive without a rule."""
    del saveable

    def res(which):
        return [v for v, u, i in zip(eqn.invars, unks_in, inst_in)
                if which(u) and type(v) is core.Var and not i]

    if not any(unks_in):
        return eqn, None, [False] * 4, [False] * 4, []
    if any(unks_in[:4]):
        return None, eqn, [True] * 4, [True] * 4, res(lambda u: not u)
    known = eqn.replace(primitive=_primal_p, invars=eqn.invars[:4], outvars=eqn.outvars[:2])
    staged = eqn.replace(primitive=_tangent_p, outvars=eqn.outvars[2:])
    return known, staged, [False, False, True, True], [False, False, True, True], \
        res(lambda u: not u)


def _jvp_jvp(primals, tangents, *, max_objects):
    """JVP of the one-call JVP (second order forward): that of the pair (``primal``,
    ``tangent``) it computes, by their own rules."""
    q, f, off, ev, dq, df = primals

    def pair(q, f, dq, df):
        return (*_primal_p.bind(q, f, off, ev, max_objects=max_objects),
                *_tangent_p.bind(q, f, off, ev, dq, df, max_objects=max_objects))

    ins = [ad.instantiate_zeros(t) for t in (tangents[0], tangents[1], tangents[4], tangents[5])]
    out, tangent = jax.jvp(pair, (q, f, dq, df), tuple(ins))
    return list(out), list(tangent)


def _linear_jvp(prim: Primitive, ref):
    """JVP of ``tangent`` / ``cotangent``: linear in their last two arguments (the
    primitive itself), the rest by JAX's derivative of the dense reference."""

    def rule(primals, tangents, *, max_objects):
        q, f, off, ev, a, b = primals
        out = prim.bind(*primals, max_objects=max_objects)
        da, db = tangents[4:]
        dq, df = tangents[:2]
        parts = []
        if not (_zero(da) and _zero(db)):
            parts.append(prim.bind(q, f, off, ev, ad.instantiate_zeros(da),
                                   ad.instantiate_zeros(db), max_objects=max_objects))
        if not (_zero(dq) and _zero(df)):
            def fn(q, f):
                return ref(q, f, off, ev, a, b, max_objects=max_objects)

            parts.append(jax.jvp(fn, (q, f), (ad.instantiate_zeros(dq),
                                              ad.instantiate_zeros(df)))[1])
        if not parts:
            return out, [jnp.zeros_like(x) for x in out]
        tangent = parts[0] if len(parts) == 1 else [x + y for x, y in zip(*parts)]
        return out, list(tangent)

    return rule


def _transpose(into: Primitive):
    """Transpose of ``tangent`` (``cotangent``) in its last two arguments: ``into``."""

    def rule(cts, q, f, off, ev, a, b, *, max_objects):
        shapes = [x.aval.shape if ad.is_undefined_primal(x) else x.shape for x in (a, b)]
        lanes = [ad.instantiate_zeros(c) for c in cts]
        ra, rb = into.bind(q, f, off, ev, *lanes, max_objects=max_objects)
        assert ra.shape == tuple(shapes[0]) and rb.shape == tuple(shapes[1])
        return [None, None, None, None,
                ra if ad.is_undefined_primal(a) else None,
                rb if ad.is_undefined_primal(b) else None]

    return rule


ad.primitive_jvps[_primal_p] = _primal_jvp
ad.primitive_jvps[_jvp_p] = _jvp_jvp
pe.custom_partial_eval_rules[_jvp_p] = _jvp_partial_eval
pe.partial_eval_jaxpr_custom_rules[_jvp_p] = _jvp_partial_eval_custom
ad.primitive_jvps[_tangent_p] = _linear_jvp(_tangent_p, _tangent_ref)
ad.primitive_jvps[_cotangent_p] = _linear_jvp(_cotangent_p, _cotangent_ref)
ad.primitive_transposes[_tangent_p] = _transpose(_cotangent_p)
ad.primitive_transposes[_cotangent_p] = _transpose(_tangent_p)


# -- batching ---------------------------------------------------------------------------------

def _size(args, dims) -> int:
    return next(x.shape[d] for x, d in zip(args, dims) if d is not None)


def _primal_batch(args, dims, *, max_objects):
    # a vmap over q or f (not a derivative's lanes): the dense reference, vmapped
    out = jax.vmap(partial(_dense, max_objects=max_objects), in_axes=tuple(dims))(*args)
    return list(out), [0, 0]


def _merged_lanes(args, dims) -> tuple[int, list]:
    """The batch size and the lane arguments with the batch axis joined to the lanes."""
    v = _size(args, dims)
    merged = []
    for x, d in zip(args[4:], dims[4:]):
        # the new axis joins the lanes: (V, B, K) -> (V * B, K)
        x = jnp.broadcast_to(x, (v,) + x.shape) if d is None else jnp.moveaxis(x, d, 0)
        merged.append(x.reshape((v * x.shape[1],) + x.shape[2:]))
    return v, merged


def _lanes_batch(prim: Primitive, ref):
    def rule(args, dims, *, max_objects):
        if any(d is not None for d in dims[:4]):
            out = jax.vmap(partial(ref, max_objects=max_objects), in_axes=tuple(dims))(*args)
            return list(out), [0, 0]
        v, merged = _merged_lanes(args, dims)
        out = prim.bind(*args[:4], *merged, max_objects=max_objects)
        return [o.reshape((v, -1) + o.shape[1:]) for o in out], [0, 0]

    return rule


def _jvp_batch(args, dims, *, max_objects):
    if any(d is not None for d in dims[:4]):
        out = jax.vmap(partial(_jvp_ref, max_objects=max_objects), in_axes=tuple(dims))(*args)
        return list(out), [0, 0, 0, 0]
    # a batch of tangents (jax.jacfwd's parameters): more lanes, the values unbatched
    v, merged = _merged_lanes(args, dims)
    w, p, dw, dp = _jvp_p.bind(*args[:4], *merged, max_objects=max_objects)
    return ([w, p] + [o.reshape((v, -1) + o.shape[1:]) for o in (dw, dp)],
            [None, None, 0, 0])


batching.primitive_batchers[_primal_p] = _primal_batch
batching.primitive_batchers[_tangent_p] = _lanes_batch(_tangent_p, _tangent_ref)
batching.primitive_batchers[_cotangent_p] = _lanes_batch(_cotangent_p, _cotangent_ref)
batching.primitive_batchers[_jvp_p] = _jvp_batch
