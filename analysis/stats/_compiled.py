"""Reverse mode's chunk computations, compiled the second time a structure is met.

:func:`_values` (first pass: the chunk's states) and :func:`_pullback` (second pass:
the states and ``grad <T_bar, T_c(theta)>``, one reverse sweep, float64) trace the
chunk function to a jaxpr and run it eagerly, or compiled once the same structure
(jaxpr text, payload and constant shapes) has been met before. Used by
:func:`analysis.stats.derive.derive`; split out of it, it re-exports every name.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from analysis._compat.jax import eval_jaxpr
from analysis.runtime import first_pass
from analysis.stats._closure import closure_inputs, closure_refusal
from analysis.stats._programs import compile_flat
from analysis.stats.merge import describe_difference
from analysis.stats.offsets import forget_bounds
from analysis.stats.passes import PassTheta, Pullback
from analysis.stats.pullback import pulled_states, pulled_sum
from analysis.stats.taylor import _to_numpy, value_and_derivatives

__all__: list[str] = []



# Compiled pullbacks by chunk-function structure: the jaxpr's text (which names no
# data: the chunk's arrays are its constants, passed as arguments) and the shapes.
# Chunks of one pass run the same code, and every gradient step sees the same chunks
# again: a structure met a second time is compiled (one call instead of thousands of
# eager operations), one met once runs eagerly (chunk shapes that never repeat cost
# no compilation). At most _COMPILED_MAX are compiled per process, then eager again.
_COMPILED: dict[str, Callable[..., Any]] = {}
_SEEN: OrderedDict[str, None] = OrderedDict()
_COMPILED_MAX = 64
_SEEN_MAX = 4096


def _cached_call(
    kind: str, closed: Any, extra: Any, build: Callable[[Any], Any], *args: Any,
    first: bool = False,
):
    """``build(jaxpr)(*args)``, compiled when this structure is met a second time
    (``first``: already the first time)."""
    text = str(closed.jaxpr)
    key = hashlib.sha256(repr((kind, text, extra)).encode()).hexdigest()
    fun = _COMPILED.get(key)
    if fun is None:
        fun = build(closed.jaxpr)
        # a function object in the text (" at 0x...") is never the same twice
        seen = first or key in _SEEN
        if seen and len(_COMPILED) < _COMPILED_MAX and " at 0x" not in text:
            fun = _COMPILED[key] = jax.jit(fun)
        _SEEN[key] = None
        _SEEN.move_to_end(key)
        while len(_SEEN) > _SEEN_MAX:
            _SEEN.popitem(last=False)
    return fun(*args)


def _signature(consts: list) -> list:
    return [(np.shape(c), str(np.result_type(c))) for c in consts]


def _values(f: Callable[[Any], Any], t0: Any) -> Any:
    """``f(t0)``: the first pass's chunk states (compiled from the second sight on)."""
    closed, shapes = jax.make_jaxpr(f, return_shape=True)(t0)
    out_tree = jax.tree_util.tree_structure(shapes)
    consts = list(closed.consts)

    def build(jaxpr):
        return lambda consts, t: eval_jaxpr(jaxpr, consts, t)

    flat = _cached_call("values", closed, (out_tree, _signature(consts)), build, consts, t0)
    return jax.tree_util.tree_unflatten(out_tree, flat)


def _check_merged(states: Any, theta: PassTheta) -> None:
    diff = describe_difference(states, theta.merged)
    if diff is not None:
        raise ValueError(
            "stats.derive: the chunk's states differ from the merged states of the "
            f"first pass {diff}"
        )


def _all_finite(value: Any) -> bool:
    """Whether every leaf of a chunk's states and sums (numpy) is finite."""
    return all(bool(np.all(np.isfinite(v))) for v in jax.tree_util.tree_leaves(value))


def _pullback_body(pay_tree: Any, *, guarded: bool = False) -> Callable[..., Any]:
    """``(f, t, pay) -> (grad <T_bar, T_c(t)>, states)``: one trace of ``f``, one reverse
    sweep. ``guarded``: ``f`` traced within :func:`pulled_states` (its states those of
    their finite entries), the gradient only (:func:`_chunk_pullback`)."""

    def body(f, t, pay):
        def scalar(tt):
            states = f(tt)
            return pulled_sum(states, jax.tree_util.tree_unflatten(pay_tree, pay)), states

        if not guarded:
            return jax.grad(scalar, has_aux=True)(t)
        with pulled_states():  # the states of the finite entries (pullback.py)
            return jax.grad(lambda tt: scalar(tt)[0])(t)

    return body


def _chunk_pullback(fn: Any, wrap: Callable[[Any], Callable[[Any], Any]],
                    f: Callable[[Any], Any], t0: Any, names: tuple[str, ...],
                    theta: PassTheta, key: Any) -> Pullback:
    """The chunk's states and ``grad <T_bar, T_c(theta)>`` (:func:`compiled_call`, else
    the traced :func:`_pullback`). The plain states are pulled where every value of the
    chunk is finite: every entry of its ``stats.moments``/``comoments`` states is then
    finite, and those states are the states of their finite entries, bit for bit. A chunk
    with a non-finite value (a NaN entry's) takes its gradient from a second program,
    ``fn`` traced within :func:`pulled_states` (:mod:`analysis.stats.pullback`), built
    and run for such chunks only: finite chunks trace and sweep ``fn`` once."""
    pay, pay_tree = jax.tree_util.tree_flatten(theta.payload)
    key = (key, pay_tree, tuple((np.shape(x), str(np.result_type(x))) for x in pay))
    got = compiled_call("pullback", fn, wrap, _pullback_body(pay_tree), key, t0, pay)
    if got is None:
        return _pullback(f, t0, names, theta)
    grad, value = got
    _check_merged(value, theta)
    value = _to_numpy(value)
    if not _all_finite(value):
        grad = compiled_call("pullback_guarded", fn, wrap,
                             _pullback_body(pay_tree, guarded=True), key, t0, pay)
        if grad is None:
            grad = _traced_sweep("pullback_guarded", f, t0, theta)[0]
    return Pullback(names, value, np.asarray(grad, dtype=np.float64))


def _traced_sweep(kind: str, f: Callable[[Any], Any], t0: Any, theta: PassTheta,
                  check: bool = False) -> tuple[Any, Any]:
    """``(grad <T_bar, T_c(t0)>, states)`` of ``f`` traced to a jaxpr (within
    :func:`pulled_states` for ``kind`` ``"pullback_guarded"``), compiled from the
    second sight of its structure on; ``check``: the states' structure against the
    merged states first."""
    if kind == "pullback_guarded":
        # a new function: make_jaxpr would give f's plain trace again from JAX's cache
        # of traces, whose key does not hold the context
        with pulled_states():  # the states of the finite entries (pullback.py)
            closed, shapes = jax.make_jaxpr(lambda t: f(t), return_shape=True)(t0)
    else:
        closed, shapes = jax.make_jaxpr(f, return_shape=True)(t0)
    if check:
        _check_merged(shapes, theta)
    out_tree = jax.tree_util.tree_structure(shapes)
    pay, pay_tree = jax.tree_util.tree_flatten(theta.payload)
    consts = list(closed.consts)

    def build(jaxpr):
        def grad_and_states(consts, t, pay):
            def scalar(tt):
                flat = eval_jaxpr(jaxpr, consts, tt)
                states = jax.tree_util.tree_unflatten(out_tree, flat)
                return pulled_sum(states, jax.tree_util.tree_unflatten(pay_tree, pay)), flat

            return jax.grad(scalar, has_aux=True)(t)

        return grad_and_states

    extra = (out_tree, pay_tree, [np.shape(p) for p in pay], _signature(consts))
    grad, flat = _cached_call(kind, closed, extra, build, consts, t0, pay)
    return grad, jax.tree_util.tree_unflatten(out_tree, flat)


def _pullback(f: Callable[[Any], Any], t0: Any, names: tuple[str, ...], theta: PassTheta):
    """The chunk's states and ``grad <T_bar, T_c(theta)>`` on the traced path (one
    reverse sweep; a chunk with a non-finite value: the guarded one, as in
    :func:`_chunk_pullback`)."""
    grad, value = _traced_sweep("pullback", f, t0, theta, check=True)
    value = _to_numpy(value)
    if not _all_finite(value):
        grad = _traced_sweep("pullback_guarded", f, t0, theta)[0]
    return Pullback(names, value, np.asarray(grad, dtype=np.float64))


#: What tracing a chunk function raises when it needs concrete values (Python control
#: flow or ``int()``/``float()``/numpy on values): it then runs eagerly, as before.
_UNTRACEABLE = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError,
)


def _forward(f: Callable[[Any], Any], t0: Any, order: int,
             block: int | None = None) -> tuple[Any, Any, Any]:
    """``value_and_derivatives(f, t0, order, block)`` as one compiled program whose arguments
    are the chunk's arrays (the traced function's constants) and ``t0``; compiled the
    first time a structure (jaxpr text, constant shapes and dtypes, order) is met, kept
    for later chunks and passes of the same shapes (and on disk by JAX's persistent
    compilation cache, :mod:`analysis`). A function that cannot be traced runs eagerly
    after one warning line saying why."""
    try:
        closed, shapes = jax.make_jaxpr(f, return_shape=True)(t0)
    except _UNTRACEABLE as err:
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        warnings.warn(
            f"stats.derive: fn cannot be compiled (it needs concrete values: {why}); "
            "running it eagerly", RuntimeWarning, stacklevel=3,
        )
        return value_and_derivatives(f, t0, order=order, block=block)
    out_tree = jax.tree_util.tree_structure(shapes)
    consts = list(closed.consts)

    def build(jaxpr):
        def run(consts, t):
            def g(tt):
                return jax.tree_util.tree_unflatten(out_tree, eval_jaxpr(jaxpr, consts, tt))

            return value_and_derivatives(g, t, order=order, block=block)

        return run

    extra = (out_tree, _signature(consts), order, block)
    return _cached_call(f"forward{order}", closed, extra, build, consts, t0, first=True)


# --- the chunk's arrays as arguments, padded to buckets (analysis.stats._closure) ------

# Programs by (kind, closure structure, parameter structure, options): one per bucket
# of chunk shapes, reused by every later chunk and pass that falls in it, without
# tracing the chunk function again. Least recently used dropped beyond the maximum.
_PROGRAMS: OrderedDict[Any, Callable[..., Any]] = OrderedDict()
_PROGRAMS_MAX = 256
# Structures whose compiled trace raised (the function needs concrete lists or values):
# they take the traced path (:func:`_forward`, :func:`_values`, :func:`_pullback`).
_REFUSED: set = set()
#: Programs built (traced and compiled) in this process (tests count compilations with it).
BUILT = {"programs": 0}


# Chunk functions already named by :func:`_name_the_slow_path` in this process (by code).
_NAMED: set = set()


def _name_the_slow_path(fn: Any) -> None:
    """One warning line per chunk function and process where ``fn`` closes over what
    cannot be an argument of a compiled program (an object of a class of yours, ``self``):
    it is then traced and compiled on every chunk, ~10x a compiled later pass."""
    what = closure_refusal(fn)
    code = getattr(fn, "__code__", None)
    if what is None or code is None or code in _NAMED:
        return
    _NAMED.add(code)
    where = f"{fn.__name__} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
    warnings.warn(
        f"stats.derive: {where} closes over {what}, so it is traced and compiled again on "
        "every chunk (about 10x slower on later passes): copy what it reads into local "
        "variables before defining it (nmin = self.nmin) and close over those",
        RuntimeWarning, stacklevel=4,
    )


def compiled_call(kind: str, fn: Any, wrap: Callable[[Any], Callable[[Any], Any]],
                  body: Callable[..., Any], key: Any, t0: Any, *extra: Any) -> Any:
    """``body(wrap(fn), t0, *extra)`` compiled with ``fn``'s closed-over arrays as
    (padded) arguments, or ``None`` where ``fn`` cannot be converted (its closure) or
    traced that way (then the caller runs its traced path, which also names the error)."""
    conv = closure_inputs(fn)
    if conv is None:
        _name_the_slow_path(fn)
        return None
    # the process configured (malloc keeps the program's temporaries: 45-48 -> 30-34 ms
    # per 50k-event chunk) and the imported libraries' objects out of full garbage
    # collections (one of 0.14-0.28 s fell in the first pass at chunks of 50k):
    # analysis.runtime.allocator
    first_pass()
    structure, args, rebuild = conv
    full_key = (kind, structure, key)
    if full_key in _REFUSED:
        return None
    program = _PROGRAMS.get(full_key)
    call_args = (args, t0, *extra)
    if program is None:
        def run(args, t, *extra):
            try:
                return body(wrap(rebuild(args)), t, *extra)
            finally:
                forget_bounds()

        try:
            # traced and lowered here; a new process loads the compilation from JAX's
            # persistent cache (analysis.runtime.compilecache)
            program = compile_flat(run, call_args)
            out = program(*call_args)
        except Exception:
            _REFUSED.add(full_key)
            return None
        _PROGRAMS[full_key] = program
        BUILT["programs"] += 1
        while len(_PROGRAMS) > _PROGRAMS_MAX:
            _PROGRAMS.popitem(last=False)
        return out
    _PROGRAMS.move_to_end(full_key)
    return program(*call_args)
