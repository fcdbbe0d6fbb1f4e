"""States with their derivatives: :class:`Derived`, :func:`derive`, :func:`differentiable`.

The one way this package carries derivatives through chunked passes. Parameters
``theta`` are any pytree of real arrays (a dict of floats, a dict of arrays, an
equinox module such as :class:`analysis.stats.MLP`; :mod:`analysis.stats._params`
names the entries and fixes their order).

Forward mode (few parameters):

* :func:`derive` evaluates ``fn(theta)`` (a pytree of mergeable states and sums,
  written in JAX: soft cuts, :func:`analysis.stats.moments`, ...) with its Jacobian
  (and Hessian) with respect to every entry of ``theta``, by ``jax.jacfwd``.
* A :class:`Derived` holds ``value``, ``jac`` and ``hess`` pytrees of float64 numpy
  arrays (Jacobian leaves have a trailing parameter axis ``(P,)``, Hessian leaves
  ``(P, P)``). ``a + b`` merges exactly: the merged value is
  :func:`analysis.stats.merge` of the values, and its derivatives are those of the
  merge applied to the states' Taylor expansions ``s(d) = s0 + J d + d^T H d / 2`` at
  ``d = 0`` (``jax.jacfwd`` / ``jax.hessian``, jit-compiled once per structure). Any
  chunking, merge order or grouping gives the same result up to rounding, so a coffea
  processor returns ``{dataset: Derived}`` and ``processor.accumulate`` merges.
* Statistics come at the end, from the merged states: ``d.value_and_grad(g)`` and
  ``d.hessian(g)`` differentiate any JAX function ``g`` of the states by the same
  Taylor expansion (exact by the chain rule).

Reverse mode (many parameters: cost and memory per chunk independent of P times the
number of states):

* :func:`differentiable` ``(run, mode="reverse")`` runs a first pass of values only
  and, for ``jax.grad``, a second pass that pulls the loss's cotangent ``S_bar`` of the
  merged states back through every chunk. ``run`` receives a :class:`PassTheta`, which
  the processor passes to :func:`derive` unchanged (it travels to the executors'
  workers with the processor): in the second pass :func:`derive` returns a
  :class:`Pullback`, the chunk's states and an O(P) gradient share, and
  ``processor.accumulate`` adds the shares.
* Exact whatever the chunking and executor: with ``a`` the merged mean (a constant from
  the first pass), the merged centred moments are a fixed function of power sums about
  ``a`` that add over chunks, ``M_r = sum_c sum_{i in c} w_i (x_i - mu)^r`` with
  ``mu = a + T_1 / T_0`` and ``T_r = sum_c T_{c,r}``,
  ``T_{c,r} = sum_{i in c} w_i (x_i - a)^r = sum_k C(r, k) M_{c,k} (mu_c - a)^(r - k)``.
  So ``dL/dtheta = sum_c d/dtheta <T_bar, T_c(theta)>`` with
  ``T_bar = (dS/dT)^T S_bar`` computed once from the merged state: each chunk's share
  is a function of its own inputs and constants only (:mod:`analysis.stats.pullback`
  gives the formulas, also for co-moments and sums).
* Compilation: forward mode (every order) and both passes of reverse mode compile
  ``fn`` with its derivatives once per *bucket* of chunk shapes, the chunk's arrays as
  arguments (:mod:`analysis.stats._closure`: the arrays ``fn`` closes over, a
  :class:`~analysis.stats.Jagged`'s values padded with zeros beyond ``offsets[-1]``,
  weight 0 everywhere), so that later chunks and passes run without tracing ``fn``
  again, and new processes load the programs from JAX's persistent compilation cache.
  A function closing over anything else, or calling what needs concrete lists, is
  traced on every chunk (forward mode: compiled once per exact shape; reverse mode:
  from the second time a structure is met); one that cannot be traced (Python control
  flow on values) runs eagerly after one warning line.
* :func:`differentiable` ``(run)`` (``mode="auto"``) picks forward mode up to
  :data:`AUTO_FORWARD_MAX` parameters and reverse mode above; ``jax.grad``,
  ``jax.value_and_grad`` and ``jax.jit`` work in both; ``jax.hessian`` needs forward
  mode (order-2 states) and refuses in one line in reverse mode.

Where the parts live (every name is re-exported here): :mod:`analysis.stats.taylor`
(Taylor expansions, :func:`taylor_derivatives`, :func:`value_and_derivatives`),
:mod:`analysis.stats.derived` (:class:`Derived`, :func:`join`),
:mod:`analysis.stats.passes` (:class:`PassTheta`, :class:`Pullback`),
:mod:`analysis.stats._compiled` (reverse mode's compiled chunk computations),
:mod:`analysis.stats._differentiable` (:func:`differentiable`, :func:`choose_mode`).
This module: :func:`derive`.
"""

from __future__ import annotations

import numbers
import os
import traceback
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.runtime import ensure_configured, forkguard
from analysis.stats._compiled import (  # noqa: F401  (re-exported)
    _COMPILED,
    _COMPILED_MAX,
    _SEEN,
    _SEEN_MAX,
    _cached_call,
    _check_merged,
    _chunk_pullback,
    _forward,
    _pullback,
    _pullback_body,
    _signature,
    _values,
    compiled_call,
)
from analysis.stats._differentiable import (  # noqa: F401  (re-exported)
    _MODES,
    _NO_FORWARD,
    AUTO_FORWARD_MAX,
    _agreeing,
    _no_forward_derivatives,
    _payload,
    _shapes,
    choose_mode,
    differentiable,
)
from analysis.stats._params import numpy_vector, param_spec
from analysis.stats.derived import Derived, join
from analysis.stats.histogram import Histogram
from analysis.stats.merge import is_state
from analysis.stats.offsets import device_array
from analysis.stats.passes import PassTheta, Pullback, _shown  # noqa: F401  (re-exported)
from analysis.stats.taylor import (  # noqa: F401  (re-exported)
    _expanded,
    _merge_taylor,
    _symmetric,
    _to_numpy,
    taylor_derivatives,
    value_and_derivatives,
)

__all__ = [
    "AUTO_FORWARD_MAX",
    "Derived",
    "PassTheta",
    "Pullback",
    "choose_mode",
    "derive",
    "differentiable",
    "join",
    "taylor_derivatives",
    "value_and_derivatives",
]


# --- checks ---------------------------------------------------------------------------


def _checked_states(tree: Any, func: str) -> Any:
    """``tree`` with its leaves as float64 JAX arrays, after checking that every leaf
    is a state or a sum and every container a dict, list or tuple."""

    def walk(node: Any, path: str) -> Any:
        if is_state(node):
            return type(node)(*(jnp.asarray(v, dtype=jnp.float64) for v in node))
        if isinstance(node, Histogram):
            return jax.tree_util.tree_map(lambda v: jnp.asarray(v, dtype=jnp.float64), node)
        if isinstance(node, dict):
            return {k: walk(v, f"{path}[{k!r}]") for k, v in node.items()}
        if type(node) in (list, tuple):
            return type(node)(walk(v, f"{path}[{i}]") for i, v in enumerate(node))
        ok = isinstance(node, (jax.Array, np.ndarray, np.generic)) or (
            isinstance(node, numbers.Real) and not isinstance(node, bool)
        )
        if not ok or np.dtype(getattr(node, "dtype", np.float64)).kind not in "iuf":
            raise TypeError(
                f"{func}: fn(theta){path or ''} is a {type(node).__name__}; expected a "
                "state (stats.moments / stats.comoments / stats.histogram) or a sum (a real "
                "number or array)"
            )
        return jnp.asarray(node, dtype=jnp.float64)

    return walk(tree, "")


# --- derive ---------------------------------------------------------------------------

#: what a raw awkward array combined with a parameter (awkward's own, deprecated JAX
#: backend, not registered here) raises inside ``fn``, instead of awkward's message
AWKWARD_HINT = (
    "stats.derive: fn combines an awkward Array with a parameter; wrap the array first: "
    "stats.from_awkward(events.Jet.pt) (a stats.Jagged; flat arrays: ak.to_numpy(...))"
)


def _awkward_with_a_parameter(err: BaseException) -> bool:
    """``err`` is awkward's on an awkward Array combined with a JAX number inside ``fn``.

    Two forms, depending on what ran before in the process (not on ``fn``): awkward's
    JAX backend unregistered, its RuntimeError naming ``ak.jax``; registered (the
    awkward drop-ins register it, :func:`analysis.stats._shadow.jax_backend`),
    whatever awkward's ufunc dispatch raises on the tracer (a TypeError while it
    formats its own message).
    """
    if isinstance(err, RuntimeError) and "ak.jax" in str(err):
        return True
    frames = traceback.extract_tb(err.__traceback__)
    return any(
        fr.name == "__array_ufunc__" and f"awkward{os.sep}highlevel" in fr.filename
        for fr in frames
    )


def derive(fn: Callable[[Any], Any], theta: Any, *, order: int = 1,
           block: int | None = None) -> Any:
    """Evaluate ``fn(theta)`` with its derivatives: a :class:`Derived`.

    ``theta``: the parameters, any pytree of finite real numbers or arrays (a dict of
    floats, a dict of arrays, an equinox module's parameters; see
    :mod:`analysis.stats._params` for the entry names and their order). ``fn``
    receives the same pytree with float64 JAX leaves and returns a pytree (dicts,
    lists, tuples) whose leaves are states (:func:`~analysis.stats.moments`,
    :func:`~analysis.stats.comoments`, :func:`~analysis.stats.histogram`) or sums (real numbers or arrays). ``order``: 0
    (values only), 1 (Jacobian, default) or 2 (and Hessian), by forward-mode JAX
    (cost grows with the number of parameters P; memory with the tangents of a block,
    ``block``). Anything else as a leaf, or
    a non-finite parameter, raises naming it.

    ``theta`` may also be the :class:`PassTheta` that :func:`differentiable` gives
    ``run`` in reverse mode: then ``order`` is ignored and the result is the first
    pass's values (an order-0 :class:`Derived`) or the second pass's
    :class:`Pullback` (one reverse-mode sweep of ``fn``, O(P) memory).

    Parameters
    ----------
    fn : callable
        ``fn(theta) -> pytree`` of states (:func:`~analysis.stats.moments`,
        :func:`~analysis.stats.comoments`, :func:`~analysis.stats.histogram`) and sums,
        computed with JAX from one chunk's data.
    theta : pytree or PassTheta
        The parameters (finite real numbers or arrays), or the :class:`PassTheta` given
        to ``run`` in reverse mode.
    order : int, optional
        Keyword-only. 0 (values only), 1 (Jacobian, default) or 2 (and Hessian).
    block : int, optional
        Keyword-only. Tangents per block of the forward derivatives
        (:func:`value_and_derivatives`: memory grows with the block, not with P); None
        (default): from the size of the largest array ``fn`` reads or makes.

    Returns
    -------
    Derived or Pullback
        A :class:`Derived`: ``fn(theta)`` with float64 leaves, its Jacobian ``(..., P)``
        and, for ``order=2``, its Hessian ``(..., P, P)``, with the sorted parameter
        entry names; or, for a :class:`PassTheta`, an order-0 :class:`Derived` (first
        pass) or a :class:`Pullback` (second pass).
    """
    if order not in (0, 1, 2):
        raise ValueError(f"stats.derive: order: expected 0, 1 or 2, found {order!r}")
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block < 1):
        raise ValueError(f"stats.derive: block: expected a positive integer or None, found {block!r}")
    forkguard.check()  # before any JAX work: a process forked after JAX started hangs in it
    ensure_configured()  # a worker's (or a notebook's) first derivative: analysis.runtime
    task = theta.task if isinstance(theta, PassTheta) else None
    params = theta.params if isinstance(theta, PassTheta) else theta
    spec = param_spec(params, "stats.derive")
    vec = numpy_vector(spec, params)
    spec.check_finite(vec, "stats.derive")
    t0 = device_array(vec)  # jnp.asarray would compile a program per shape

    def wrap(fn):
        def f(t):
            try:
                out = fn(spec.unflatten(t))
            except Exception as err:
                if not _awkward_with_a_parameter(err):
                    raise
                raise TypeError(AWKWARD_HINT) from None
            return _checked_states(out, "stats.derive")

        return f

    f = wrap(fn)
    if task == "pullback":
        return _chunk_pullback(fn, wrap, f, t0, spec.names, theta, spec.key)
    if task == "values":
        got = compiled_call("values", fn, wrap, lambda f, t: f(t), spec.key, t0)
        value = _values(f, t0) if got is None else got
        return Derived(spec.names, _to_numpy(value), at=vec)
    got = compiled_call(f"forward{order}", fn, wrap,
                        lambda f, t: value_and_derivatives(f, t, order=order, block=block),
                        (spec.key, block), t0)
    value, jac, hess = _forward(f, t0, order, block) if got is None else got
    # the JAX arrays as they are: their program runs while the next chunk is read
    # (Derived converts them to numpy when they are first read)
    if order == 0:
        return Derived(spec.names, value, at=vec)
    return Derived(spec.names, value, jac, hess, at=vec)
