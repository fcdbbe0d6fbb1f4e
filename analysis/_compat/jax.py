"""Every use of JAX outside its stable public API (``jax.numpy``, ``jax.lax``, the
transforms, ``jax.extend``), in one place, each a small named function.

JAX's public API has no way to write a primitive's differentiation, transposition and
batching rules (``jax.interpreters.ad``, ``batching``, ``mlir``), nor to ask whether the
caller is being traced for compilation; ``jax.core`` is public but shrinks with every
release (its deprecations: ``jax/core.py``). Nothing else in ``analysis`` or
``processors`` reaches these modules (``tests/_compat/test_private_imports.py``): when a
newer JAX moves one, this module is the one to change, and
``tests/_compat/test_jax.py`` says which attribute is gone and in which JAX version.

Each private name is resolved when this module is imported; a missing one is recorded
(:data:`MISSING`), not raised, so that ``analysis`` still imports; using it raises
:class:`CompatError` naming it and JAX's version. :func:`staged` keeps its old
fallback instead (answers "staged", which only costs padding).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analysis._compat import CompatError, lookup

__all__ = [
    "PRIVATE",
    "CompatError",
    "Tracer",
    "eval_jaxpr",
    "is_undefined_primal",
    "is_zero",
    "linear_call_rules",
    "register_batcher",
    "register_jvp",
    "register_lowering",
    "register_transpose",
    "shaped_array",
    "staged",
    "zero",
    "zero_cotangent",
]

#: The JAX version these names were checked against.
WRITTEN_FOR = "0.10.2"

#: Each name this module takes from outside JAX's stable API: ``name -> (module,
#: attribute, what for)``.
PRIVATE: dict[str, tuple[str, str, str]] = {
    "Tracer": ("jax.core", "Tracer", "is a value traced (stats' eager numpy paths)"),
    "ShapedArray": ("jax.core", "ShapedArray", "abstract values of own primitives"),
    "eval_jaxpr": ("jax.core", "eval_jaxpr", "replaying a traced chunk function"),
    "Zero": ("jax.interpreters.ad", "Zero", "symbolic zero tangents and cotangents"),
    "is_undefined_primal": ("jax.interpreters.ad", "is_undefined_primal",
                            "transpose rules: which operand is linear"),
    "primitive_jvps": ("jax.interpreters.ad", "primitive_jvps", "own primitives' JVP rules"),
    "primitive_transposes": ("jax.interpreters.ad", "primitive_transposes",
                             "own primitives' transpose rules"),
    "primitive_batchers": ("jax.interpreters.batching", "primitive_batchers",
                           "own primitives' vmap rules"),
    "register_lowering": ("jax.interpreters.mlir", "register_lowering",
                          "own primitives' XLA lowering"),
    "lower_fun": ("jax.interpreters.mlir", "lower_fun", "own primitives' XLA lowering"),
    "trace_ctx": ("jax._src.core", "trace_ctx", "the active trace (staged())"),
    "linear_call_p": ("jax._src.custom_derivatives", "linear_call_p",
                      "linear_call's vmap and second-order rules (linear_call_rules())"),
    "DynamicJaxprTrace": ("jax._src.interpreters.partial_eval", "DynamicJaxprTrace",
                          "the trace of jit / scan bodies (staged())"),
}


def _lookup(name: str) -> Any:
    return lookup(PRIVATE, name, library="jax", written_for=WRITTEN_FOR)


#: The names of :data:`PRIVATE` this JAX lacks, with the error each would raise.
MISSING: dict[str, CompatError] = {}
_FOUND: dict[str, Any] = {}
for _name in PRIVATE:
    try:
        _FOUND[_name] = _lookup(_name)
    except CompatError as _err:
        MISSING[_name] = _err


def _get(name: str) -> Any:
    if name in MISSING:
        raise MISSING[name]
    return _FOUND[name]


class _Missing:
    """Stands for a missing class in ``isinstance`` (nothing is an instance of it)."""


#: JAX's tracer class, for ``isinstance(x, Tracer)`` in hot paths (a class, not a
#: function: no call per value).
Tracer: Any = _FOUND.get("Tracer", _Missing)
_ShapedArray = _FOUND.get("ShapedArray")
_Zero: Any = _FOUND.get("Zero", _Missing)


def shaped_array(shape: tuple[int, ...], dtype: Any) -> Any:
    """JAX's abstract value of an array of ``shape`` and ``dtype`` (an abstract-eval
    rule's result).

    Parameters
    ----------
    shape : tuple of int
        The shape.
    dtype : dtype-like
        The element type.

    Returns
    -------
    jax.core.ShapedArray
        The abstract value.
    """
    return _get("ShapedArray")(shape, dtype)


def eval_jaxpr(jaxpr: Any, consts: Any, *args: Any) -> list:
    """Evaluate ``jaxpr`` (of a ``jax.make_jaxpr`` result) on ``consts`` and ``args``.

    Parameters
    ----------
    jaxpr : jax.extend.core.Jaxpr
        The open jaxpr.
    consts : sequence
        Its constants.
    *args
        Its arguments.

    Returns
    -------
    list
        Its flat outputs.
    """
    return _get("eval_jaxpr")(jaxpr, consts, *args)


def staged() -> bool:
    """True while JAX traces for compilation (``jax.jit``, ``lax.scan`` bodies, ...).

    Walks JAX's stack of active traces for a ``DynamicJaxprTrace`` (private: no public
    API says it). Where this JAX lacks those names, ``True`` (callers then skip work
    that only pays off eagerly).

    Returns
    -------
    bool
        Whether a trace for compilation is active.
    """
    try:
        trace = _get("trace_ctx").trace
        staging = _get("DynamicJaxprTrace")
        while trace is not None:
            if isinstance(trace, staging):
                return True
            trace = getattr(trace, "parent_trace", None)
        return False
    except (CompatError, AttributeError):
        return True


def is_zero(t: Any) -> bool:
    """Whether ``t`` is JAX's symbolic zero tangent or cotangent (``ad.Zero``).

    Parameters
    ----------
    t : object
        A tangent or cotangent given to a rule.

    Returns
    -------
    bool
        ``True`` for a symbolic zero.
    """
    return type(t) is _Zero


def zero(aval: Any) -> Any:
    """A symbolic zero of abstract value ``aval`` (a rule's result for "no tangent").

    Parameters
    ----------
    aval : jax.core.ShapedArray
        Its abstract value.

    Returns
    -------
    jax.interpreters.ad.Zero
        The symbolic zero.
    """
    return _get("Zero")(aval)


def zero_cotangent(x: Any) -> Any:
    """A symbolic zero cotangent for the undefined primal ``x`` of a transpose rule.

    Parameters
    ----------
    x : jax.interpreters.ad.UndefinedPrimal
        The linear operand.

    Returns
    -------
    jax.interpreters.ad.Zero
        Zero of ``x``'s cotangent type.
    """
    return _get("Zero")(x.aval.to_ct_aval())


def is_undefined_primal(x: Any) -> bool:
    """Whether the transpose rule's operand ``x`` is linear (its value unknown).

    Parameters
    ----------
    x : object
        An operand given to a transpose rule.

    Returns
    -------
    bool
        ``True`` for an undefined primal (it has ``.aval``).
    """
    return bool(_get("is_undefined_primal")(x))


def register_lowering(prim: Any, fn: Callable[..., Any], *, multiple_results: bool) -> None:
    """Lower ``prim`` to XLA as the JAX function ``fn`` (traced once per signature).

    Parameters
    ----------
    prim : jax.extend.core.Primitive
        The primitive.
    fn : callable
        Its implementation in JAX operations.
    multiple_results : bool
        Whether ``fn`` returns a list.

    Returns
    -------
    None
    """
    _get("register_lowering")(prim, _get("lower_fun")(fn, multiple_results=multiple_results))


def register_jvp(prim: Any, rule: Callable[..., Any]) -> None:
    """``rule(primals, tangents, **params) -> (out, tangent_out)`` as ``prim``'s JVP.

    Parameters
    ----------
    prim : jax.extend.core.Primitive
        The primitive.
    rule : callable
        The JVP rule.

    Returns
    -------
    None
    """
    _get("primitive_jvps")[prim] = rule


def register_transpose(prim: Any, rule: Callable[..., Any]) -> None:
    """``rule(ct, *args, **params) -> cotangents`` as ``prim``'s transpose (linear args).

    Parameters
    ----------
    prim : jax.extend.core.Primitive
        The primitive.
    rule : callable
        The transpose rule.

    Returns
    -------
    None
    """
    _get("primitive_transposes")[prim] = rule


def register_batcher(prim: Any, rule: Callable[..., Any]) -> None:
    """``rule(args, dims, **params) -> (out, out_dims)`` as ``prim``'s ``vmap`` rule.

    Parameters
    ----------
    prim : jax.extend.core.Primitive
        The primitive.
    rule : callable
        The batching rule.

    Returns
    -------
    None
    """
    _get("primitive_batchers")[prim] = rule


# -- linear_call: the two rules JAX 0.10.2 lacks ------------------------------------------------
#
# ``jax.custom_derivatives.linear_call(fun, fun_transpose, residuals, linear_args)`` is JAX's
# public way to give a linear function its own transpose (select/singlecall: the tangent
# kernel with the pull-back kernel as its transpose). Its primitive has no batching rule
# (jax.vmap, and with it jax.jacfwd and jax.jacrev, raise NotImplementedError) and a JVP
# that asserts the residuals' tangents are zero (jax.hessian, forward over reverse, fails).

_LINEAR_CALL: list[bool] = []


def _linear_call_batch(args, dims, **params):  # noqa: ANN001, ANN202
    """``linear_call`` under ``jax.vmap``: again a ``linear_call``, of the callee and its
    transpose vmapped (every linear argument batched, so that each cotangent is: JAX
    sums the broadcast of an unbatched one back); the batch axis first in the results."""
    import jax
    import jax.numpy as jnp
    from jax.custom_derivatives import linear_call
    from jax.extend.core import jaxpr_as_fun

    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    args = [x if d is None else jnp.moveaxis(x, d, 0) for x, d in zip(args, dims)]
    n_consts = params["num_callee_consts"]
    k = n_consts + params["num_res"]
    const_axes = [None if d is None else 0 for d in dims[:n_consts]]
    res_axes = [None if d is None else 0 for d in dims[n_consts:k]]
    lin = [x if d is not None else jnp.broadcast_to(x, (size,) + x.shape)
           for x, d in zip(args[k:], dims[k:])]
    callee = jaxpr_as_fun(params["callee"])

    def fun(residuals, linear):  # noqa: ANN001, ANN202
        c, r = residuals
        return jax.vmap(lambda c_, r_, l_: callee(*c_, *r_, *l_),
                        in_axes=(const_axes, res_axes, 0))(c, r, linear)

    def fun_t(residuals, cts):  # noqa: ANN001, ANN202
        # the transpose is traced only when transposed, as linear_call's own thunk: a
        # forward pass (jax.jacfwd) never traces it, so never makes its kernel
        # (select/singlecall: the cotangent FFI handler is compiled when first traced)
        transpose, t_consts = params["transpose_thunk"]()
        t_fun = jaxpr_as_fun(transpose)
        _, r = residuals
        return jax.vmap(lambda r_, ct_: t_fun(*t_consts, *r_, *ct_),
                        in_axes=(res_axes, 0))(r, list(cts))

    out = linear_call(fun, fun_t, (args[:n_consts], args[n_consts:k]), lin)
    return list(out), [0] * len(out)


def _linear_call_jvp(original: Callable[..., Any]) -> Callable[..., Any]:
    """JAX's JVP of ``linear_call`` where the residuals stand still; where one moves,
    the JVP of the callee itself (its own derivatives, e.g. a ``jax.custom_jvp`` in it)."""

    def rule(primals, tangents, **params):  # noqa: ANN001, ANN202
        import jax
        from jax.extend.core import jaxpr_as_fun

        k = params["num_callee_consts"] + params["num_res"]
        if all(is_zero(t) for t in tangents[:k]):
            return original(primals, tangents, **params)
        fn = jaxpr_as_fun(params["callee"])
        dense = tuple(jax.numpy.zeros(t.aval.shape, t.aval.dtype) if is_zero(t) else t
                      for t in tangents)
        out, tangent = jax.jvp(lambda *a: fn(*a), tuple(primals), dense)
        return list(out), list(tangent)

    return rule


def linear_call_rules() -> bool:
    """Give ``jax.custom_derivatives.linear_call`` a ``vmap`` rule and a JVP in its
    residuals (once per process).

    Returns
    -------
    bool
        True when ``linear_call`` then composes with ``jax.vmap``, ``jax.jacfwd``,
        ``jax.jacrev`` and second derivatives; False where this JAX lacks what the
        rules use (the callers then avoid ``linear_call``).
    """
    if not _LINEAR_CALL:
        ok = not {"linear_call_p", "primitive_jvps", "primitive_batchers", "Zero"} & set(MISSING)
        if ok:
            prim = _get("linear_call_p")
            register_batcher(prim, _linear_call_batch)
            register_jvp(prim, _linear_call_jvp(_get("primitive_jvps")[prim]))
        _LINEAR_CALL.append(ok)
    return _LINEAR_CALL[0]
