"""States with their derivatives: :class:`Derived`, :func:`derive`, :func:`differentiable`.

The one way this package carries derivatives through chunked passes:

* :func:`derive` evaluates ``fn(theta)`` (a pytree of mergeable states and sums,
  written in JAX: soft cuts, :func:`analysis.stats.moments`, ...) with its Jacobian
  (and Hessian) with respect to every entry of the dict ``theta``, by ``jax.jacfwd``.
* A :class:`Derived` holds ``value``, ``jac`` and ``hess`` pytrees of float64 numpy
  arrays (Jacobian leaves have a trailing parameter axis ``(P,)``, Hessian leaves
  ``(P, P)``, parameters in sorted name order). ``a + b`` merges exactly: the merged
  value is :func:`analysis.stats.merge` of the values, and its derivatives are those of
  the merge applied to the states' Taylor expansions ``s(d) = s0 + J d + d^T H d / 2``
  at ``d = 0`` (``jax.jacfwd`` / ``jax.hessian``, jit-compiled once per structure).
  Any chunking, merge order or grouping gives the same result up to rounding, so a
  coffea processor returns ``{dataset: Derived}`` and ``processor.accumulate`` merges.
* Statistics come at the end, from the merged states: ``d.value_and_grad(g)`` and
  ``d.hessian(g)`` differentiate any JAX function ``g`` of the states by the same
  Taylor expansion (exact by the chain rule).
* :func:`differentiable` turns ``run(theta) -> Derived`` (one chunked pass) into a JAX
  function whose derivatives are the merged Jacobian (and Hessian), so ``jax.grad``
  of any loss of the merged states costs one pass.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats.histogram import Histogram
from analysis.stats.merge import describe_difference, is_state, merge

__all__ = [
    "Derived",
    "derive",
    "differentiable",
    "join",
    "taylor_derivatives",
    "value_and_derivatives",
]


# --- checks ---------------------------------------------------------------------------


def _names(theta: Any, func: str) -> tuple[str, ...]:
    if not isinstance(theta, Mapping):
        raise TypeError(
            f"{func}: theta: expected a dict of parameter values, found {type(theta).__name__}"
        )
    for key in theta:
        if not isinstance(key, str):
            raise TypeError(f"{func}: theta: expected string parameter names, found {key!r}")
    return tuple(sorted(theta))


def _check_finite(names: tuple[str, ...], values: Any, func: str) -> None:
    for name, v in zip(names, np.asarray(values, dtype=np.float64).reshape(-1), strict=True):
        if not math.isfinite(v):
            raise ValueError(f"{func}: theta[{name!r}] = {v}: expected a finite number")


def _theta_vector(theta: Mapping, names: tuple[str, ...], func: str) -> np.ndarray:
    out = []
    for name in names:
        v: Any = theta[name]
        if isinstance(v, bool) or not isinstance(
            v, (numbers.Real, np.ndarray, np.generic, jax.Array)
        ):
            raise TypeError(f"{func}: theta[{name!r}]: expected a number, found {type(v).__name__}")
        shape = tuple(getattr(v, "shape", ()))
        if shape:
            raise ValueError(f"{func}: theta[{name!r}]: expected a scalar, found shape {shape}")
        out.append(float(v))
    vec = np.asarray(out, dtype=np.float64)
    _check_finite(names, vec, func)
    return vec


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


# --- Derived --------------------------------------------------------------------------


class Derived:
    """Mergeable states with their derivatives w.r.t. named parameters (float64).

    ``names``: parameter names; ``value``: pytree of states and sums (the
    merged states once added up); ``jac`` / ``hess``: the same pytree with trailing
    ``(P,)`` / ``(P, P)`` axes (``hess`` is None for first order, ``jac`` too for
    ``order=0``: values only; the Hessian is stored symmetrised, ``(H + H^T) / 2``).
    ``a + b`` merges exactly (:mod:`analysis.stats.merge`), ``0 + a`` is ``a`` (so
    ``sum()`` works); ``a + b`` with different parameter names, structures or orders
    raises ``ValueError`` naming the difference. ``names`` follow the Jacobian's
    parameter axis (sorted by :func:`derive`; the YAML kernel uses the plan's order).
    Pickles (numpy leaves), so coffea's executors ship it between processes.
    """

    __slots__ = ("names", "value", "jac", "hess")

    def __init__(self, names: Any, value: Any, jac: Any = None, hess: Any = None) -> None:
        self.names = tuple(names)
        self.value = value
        self.jac = jac
        # Symmetrised: a Taylor expansion (how merges and statistics are differentiated)
        # only sees the symmetric part, so an empty merge now returns it bit for bit.
        self.hess = None if hess is None else jax.tree_util.tree_map(_symmetric, hess)

    def __getstate__(self) -> tuple:
        return (self.names, self.value, self.jac, self.hess)

    def __setstate__(self, state: tuple) -> None:
        self.names, self.value, self.jac, self.hess = state

    @property
    def order(self) -> int:
        """0 (values only), 1 (Jacobian) or 2 (Jacobian and Hessian)."""
        return 0 if self.jac is None else (1 if self.hess is None else 2)

    @property
    def n_params(self) -> int:
        return len(self.names)

    def _check_compatible(self, other: Derived) -> None:
        if self.names != other.names:
            raise ValueError(
                "Derived + Derived: parameter names differ: "
                f"{list(self.names)} vs {list(other.names)}"
            )
        if self.order != other.order:
            raise ValueError(
                f"Derived + Derived: derivative orders differ: {self.order} vs {other.order}"
            )
        diff = describe_difference(self.value, other.value)
        if diff is not None:
            raise ValueError(f"Derived + Derived: state structures differ {diff}")

    def __add__(self, other: Any) -> Derived:
        if isinstance(other, numbers.Number) and other == 0:
            return self
        if not isinstance(other, Derived):
            return NotImplemented
        self._check_compatible(other)
        value, jac, hess = _merge_taylor(
            self.value, self.jac, self.hess, other.value, other.jac, other.hess, order=self.order
        )
        return Derived(self.names, _to_numpy(value), _to_numpy(jac), _to_numpy(hess))

    def __radd__(self, other: Any) -> Derived:
        return self.__add__(other)

    def taylor(self) -> tuple[Any, Any, Any]:
        """``(value, jac, hess)`` pytrees (``hess`` None below order 2)."""
        return self.value, self.jac, self.hess

    def _derivatives(self, g: Callable[[Any], Any], order: int) -> tuple[Any, Any, Any]:
        if self.order < order:
            raise ValueError(
                f"Derived: order-{order} derivatives requested from an order-{self.order} state "
                f"(use stats.derive(..., order={order}))"
            )
        return taylor_derivatives(g, self.value, self.jac, self.hess, order=order)

    def value_and_grad(self, g: Callable[[Any], Any]) -> tuple[float, dict[str, float]]:
        """``(g(value), {name: dg/dname})`` for a scalar JAX function ``g`` of the states."""
        val, grad, _ = self._derivatives(g, 1)
        if np.ndim(val) != 0:
            raise ValueError(
                f"Derived.value_and_grad: g must return a scalar, found shape {np.shape(val)}"
            )
        grad = np.asarray(grad, dtype=np.float64).reshape(-1)
        return float(val), {n: float(v) for n, v in zip(self.names, grad, strict=True)}

    def hessian(self, g: Callable[[Any], Any]) -> dict[str, dict[str, float]]:
        """``{name: {name: d2g/dname dname}}`` for a scalar JAX function ``g`` (needs order 2)."""
        val, _, hess = self._derivatives(g, 2)
        if np.ndim(val) != 0:
            raise ValueError(
                f"Derived.hessian: g must return a scalar, found shape {np.shape(val)}"
            )
        h = np.asarray(hess, dtype=np.float64).reshape(self.n_params, self.n_params)
        return {
            a: {b: float(h[i, j]) for j, b in enumerate(self.names)}
            for i, a in enumerate(self.names)
        }

    def __repr__(self) -> str:
        return f"Derived(names={list(self.names)}, order={self.order}, value={self.value!r})"


def join(parts: Mapping[str, Derived]) -> Derived:
    """One :class:`Derived` of several: value ``{key: parts[key].value}``, and the same
    for the Jacobian and Hessian. For a processor's output ``{dataset: Derived}``, so
    that one :func:`differentiable` pass (or one ``value_and_grad``) sees every dataset.
    The parts must have the same parameter names and order (else ``ValueError``)."""
    if not isinstance(parts, Mapping) or not parts:
        raise TypeError(f"stats.join: expected a non-empty dict of Derived, found {parts!r}")
    items = list(parts.items())
    for key, d in items:
        if not isinstance(d, Derived):
            raise TypeError(f"stats.join: [{key!r}] is a {type(d).__name__}; expected a Derived")
    key0, first = items[0]
    for key, d in items[1:]:
        if d.names != first.names or d.order != first.order:
            raise ValueError(
                f"stats.join: [{key!r}] has parameters {list(d.names)} (order {d.order}); "
                f"[{key0!r}] has {list(first.names)} (order {first.order})"
            )
    value = {k: d.value for k, d in items}
    if first.order == 0:
        return Derived(first.names, value)
    jac = {k: d.jac for k, d in items}
    hess = None if first.order < 2 else {k: d.hess for k, d in items}
    return Derived(first.names, value, jac, hess)


def derive(fn: Callable[[dict], Any], theta: Mapping[str, float], *, order: int = 1) -> Derived:
    """Evaluate ``fn(theta)`` with its derivatives: a :class:`Derived`.

    ``theta``: dict of finite floats; ``fn`` receives a dict of float64 JAX scalars
    (same keys) and returns a pytree (dicts, lists, tuples) whose leaves are states
    (:func:`~analysis.stats.moments`, :func:`~analysis.stats.comoments`,
    :func:`~analysis.stats.histogram`) or sums
    (real numbers or arrays). ``order``: 0 (values only), 1 (Jacobian, default) or 2
    (and Hessian), by forward-mode JAX (few parameters, many outputs). Anything
    else as a leaf, or a non-finite ``theta`` value, raises naming it.
    """
    if order not in (0, 1, 2):
        raise ValueError(f"stats.derive: order: expected 0, 1 or 2, found {order!r}")
    names = _names(theta, "stats.derive")
    t0 = jnp.asarray(_theta_vector(theta, names, "stats.derive"))

    def f(t):
        return _checked_states(fn(dict(zip(names, t, strict=True))), "stats.derive")

    if order == 0:
        return Derived(names, _to_numpy(f(t0)))
    value, jac, hess = value_and_derivatives(f, t0, order=order)
    return Derived(names, _to_numpy(value), _to_numpy(jac), _to_numpy(hess))


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


# --- differentiable -----------------------------------------------------------------


def differentiable(run: Callable[[dict], Derived]) -> Callable[[Mapping[str, Any]], Any]:
    """A JAX function ``f(theta) -> merged states`` whose derivatives come from ``run``.

    ``run(theta_dict) -> Derived`` is typically one coffea ``Runner`` call whose
    processor returns ``stats.derive(...)`` per chunk. ``f`` takes a dict of JAX
    scalars (or floats) and returns ``run(theta).value`` as JAX arrays; its JVP is the
    merged Jacobian and, if ``run`` returns ``order=2`` states, the Jacobian's JVP is the
    merged Hessian (custom JVPs, which JAX also transposes for reverse mode). So
    ``jax.grad(lambda th: loss(f(th)))``, ``jax.value_and_grad`` and (order 2)
    ``jax.hessian`` work, with one pass of ``run`` per new ``theta`` (the last result
    is reused for the value, Jacobian and Hessian at the same point).

    Under ``jax.jit`` ``run`` is called back from the compiled code
    (``jax.pure_callback``), which needs the output structure: call ``f`` once outside
    ``jit`` first, otherwise a ``ValueError`` says so. ``f.passes()`` counts the calls
    of ``run`` so far.
    """
    memo: dict[str, Any] = {}

    def host(t: Any, names: tuple[str, ...]) -> Derived:
        vec = np.asarray(t, dtype=np.float64).reshape(-1)
        _check_finite(names, vec, "stats.differentiable")
        key = (names, tuple(vec.tolist()))
        if memo.get("key") != key:
            out = run(dict(zip(names, (float(v) for v in vec), strict=True)))
            if not isinstance(out, Derived):
                raise TypeError(
                    f"stats.differentiable: run(theta) returned a {type(out).__name__}; "
                    "expected a stats.Derived (e.g. the merged output of one dataset)"
                )
            if out.names != names:
                raise ValueError(
                    "stats.differentiable: run(theta) returned derivatives w.r.t. "
                    f"{list(out.names)}; expected the keys of theta {list(names)}"
                )
            if out.order < 1:
                raise ValueError(
                    "stats.differentiable: run(theta) returned a Derived without derivatives"
                )
            memo.update(key=key, derived=out, passes=memo.get("passes", 0) + 1)
            memo["structure"] = {
                part: jax.tree_util.tree_map(
                    lambda a: jax.ShapeDtypeStruct(np.shape(a), jnp.float64), getattr(out, part)
                )
                for part in ("value", "jac", "hess")
            }
        return memo["derived"]

    def leaves(t: Any, names: tuple[str, ...], part: str) -> list:
        if not isinstance(t, jax.core.Tracer):
            return [
                jnp.asarray(a) for a in jax.tree_util.tree_leaves(getattr(host(t, names), part))
            ]
        if "structure" not in memo:
            raise ValueError(
                "stats.differentiable: under jax.jit the output structure of run is not known yet; "
                "call f(theta) once outside jax.jit first"
            )
        shapes = jax.tree_util.tree_leaves(memo["structure"][part])
        return jax.pure_callback(
            lambda tt: [
                np.asarray(a, dtype=np.float64)
                for a in jax.tree_util.tree_leaves(getattr(host(tt, names), part))
            ],
            shapes,
            t,
            vmap_method="sequential",
        )

    def make(names: tuple[str, ...]):
        def hess_fn(t):
            if memo.get("derived") is not None and memo["derived"].order < 2:
                raise ValueError(
                    "stats.differentiable: second derivatives need run(theta) to return "
                    "stats.derive(..., order=2) states"
                )
            return leaves(t, names, "hess")

        @jax.custom_jvp
        def jac_fn(t):
            return leaves(t, names, "jac")

        @jac_fn.defjvp
        def _jac_jvp(primals, tangents):
            (t,), (dt,) = primals, tangents
            return jac_fn(t), [h @ dt for h in hess_fn(t)]

        @jax.custom_jvp
        def value_fn(t):
            return leaves(t, names, "value")

        @value_fn.defjvp
        def _value_jvp(primals, tangents):
            (t,), (dt,) = primals, tangents
            return value_fn(t), [j @ dt for j in jac_fn(t)]

        return value_fn

    fns: dict[tuple[str, ...], Any] = {}

    def f(theta: Mapping[str, Any]) -> Any:
        names = _names(theta, "stats.differentiable")
        t = jnp.stack([jnp.asarray(theta[n], dtype=jnp.float64).reshape(()) for n in names])
        if names not in fns:
            fns[names] = make(names)
        flat = fns[names](t)
        if "structure" not in memo:  # only reachable under tracing without structure
            raise ValueError("stats.differentiable: run(theta) has not been evaluated")
        treedef = jax.tree_util.tree_structure(memo["structure"]["value"])
        return jax.tree_util.tree_unflatten(treedef, flat)

    f.passes = lambda: memo.get("passes", 0)  # type: ignore[attr-defined]
    return f
