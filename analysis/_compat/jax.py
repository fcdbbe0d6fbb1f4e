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
