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
* In reverse mode the chunk computations are compiled the second time a chunk
  structure (the function's jaxpr and its arrays' shapes) is met, i.e. from the
  second gradient step on; a structure met once runs eagerly. Forward mode runs
  eagerly, as before.
* :func:`differentiable` ``(run)`` (``mode="auto"``) picks forward mode up to
  :data:`AUTO_FORWARD_MAX` parameters and reverse mode above; ``jax.grad``,
  ``jax.value_and_grad`` and ``jax.jit`` work in both; ``jax.hessian`` needs forward
  mode (order-2 states) and refuses in one line in reverse mode.
"""

from __future__ import annotations

import hashlib
import numbers
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats._params import ParamSpec, numpy_vector, param_spec
from analysis.stats.histogram import Histogram
from analysis.stats.merge import describe_difference, is_state, merge
from analysis.stats.pullback import prune, pullback_payload, pulled_sum

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

    __slots__ = ("names", "value", "jac", "hess", "at")

    def __init__(
        self, names: Any, value: Any, jac: Any = None, hess: Any = None, *, at: Any = None
    ) -> None:
        self.names = tuple(names)
        #: the parameter values the derivatives were taken at (:func:`derive` sets them;
        #: ``None``: unknown). ``a + b`` refuses a mixture of different points.
        self.at = None if at is None else tuple(float(v) for v in at)
        self.value = value
        self.jac = jac
        # Symmetrised: a Taylor expansion (how merges and statistics are differentiated)
        # only sees the symmetric part, so an empty merge now returns it bit for bit.
        self.hess = None if hess is None else jax.tree_util.tree_map(_symmetric, hess)

    def __getstate__(self) -> tuple:
        return (self.names, self.value, self.jac, self.hess, self.at)

    def __setstate__(self, state: tuple) -> None:
        self.names, self.value, self.jac, self.hess = state[:4]
        self.at = state[4] if len(state) > 4 else None

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
        if self.at is not None and other.at is not None:
            for name, a, b in zip(self.names, self.at, other.at, strict=True):
                if abs(a - b) > 1e-12 * max(abs(a), abs(b), 1.0):
                    raise ValueError(
                        f"Derived + Derived: derived at different values of parameter "
                        f"{name!r}: {a!r} vs {b!r} (a merge would mix two selections)"
                    )

    def __add__(self, other: Any) -> Derived:
        if isinstance(other, numbers.Number) and other == 0:
            return self
        if not isinstance(other, Derived):
            return NotImplemented
        self._check_compatible(other)
        value, jac, hess = _merge_taylor(
            self.value, self.jac, self.hess, other.value, other.jac, other.hess, order=self.order
        )
        return Derived(self.names, _to_numpy(value), _to_numpy(jac), _to_numpy(hess),
                       at=self.at if self.at is not None else other.at)

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


# --- one pass's task (reverse mode) -------------------------------------------------


class PassTheta(Mapping):
    """The parameters of one chunked pass, with what every chunk must compute.

    In reverse mode :func:`differentiable` hands this object to ``run(theta)`` instead
    of the bare parameters. A processor keeps it (``self.theta = theta``) and passes it
    unchanged to :func:`derive` in ``process``, as it does the parameters in forward
    mode; it pickles (numpy leaves), so it travels with the processor to coffea's
    futures and dask workers. ``task``:

    * ``"values"`` (first pass): :func:`derive` returns an order-0 :class:`Derived`
      (values only);
    * ``"pullback"`` (second pass): :func:`derive` returns a :class:`Pullback`, the
      chunk's states and its share of ``dL/dtheta``, from ``merged`` (the merged states
      of the first pass) and ``payload`` (:func:`analysis.stats.pullback.pullback_payload`).

    ``params``: the parameters (a pytree of numpy float64 arrays; 0-d leaves as
    ``np.float64``). When they are a dict, the object reads like it
    (``theta["pt_min"]``, ``len``, iteration); otherwise use ``theta.params``.

    Every :func:`derive` call of the pass gets the same payload, so the pass must
    compute only the states that ``run`` returns (one fileset per dataset, as in forward
    mode, where ``run`` returns one :class:`Derived` too); a call whose states have
    another structure raises naming the difference.
    """

    __slots__ = ("params", "task", "merged", "payload")

    def __init__(self, params: Any, task: str, merged: Any = None, payload: Any = None) -> None:
        if task not in ("values", "pullback"):
            raise ValueError(f"PassTheta: task: expected 'values' or 'pullback', found {task!r}")
        self.params = params
        self.task = task
        self.merged = merged
        self.payload = payload

    def __getstate__(self) -> tuple:
        return (self.params, self.task, self.merged, self.payload)

    def __setstate__(self, state: tuple) -> None:
        self.params, self.task, self.merged, self.payload = state

    def _mapping(self) -> Mapping:
        if not isinstance(self.params, Mapping):
            raise TypeError(
                f"PassTheta: the parameters are a {type(self.params).__name__}, not a dict: "
                "read theta.params (and pass theta itself to stats.derive)"
            )
        return self.params

    def __getitem__(self, key: Any) -> Any:
        return self._mapping()[key]

    def __iter__(self) -> Any:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

    def __repr__(self) -> str:
        return f"PassTheta(task={self.task!r}, params={self.params!r})"


class Pullback:
    """A chunk's states with its share of a reverse-mode gradient (float64).

    ``names``: the parameter entries; ``value``: pytree of states and sums (merged by
    ``+`` as in :class:`Derived`); ``grad``: ``(P,)`` vector, the chunk's
    ``d/dtheta <T_bar, T_c(theta)>`` (:mod:`analysis.stats.pullback`). ``a + b``
    merges the values and adds the gradients, which is exact: the merged gradient is
    the sum of the chunks' shares whatever the grouping. ``0 + a`` is ``a``; pickles.
    """

    __slots__ = ("names", "value", "grad")

    def __init__(self, names: Any, value: Any, grad: Any) -> None:
        self.names = tuple(names)
        self.value = value
        self.grad = np.asarray(grad, dtype=np.float64)

    def __getstate__(self) -> tuple:
        return (self.names, self.value, self.grad)

    def __setstate__(self, state: tuple) -> None:
        self.names, self.value, self.grad = state

    def __add__(self, other: Any) -> Pullback:
        if isinstance(other, numbers.Number) and other == 0:
            return self
        if not isinstance(other, Pullback):
            return NotImplemented
        if self.names != other.names:
            raise ValueError(
                f"Pullback + Pullback: parameter names differ: {_shown(self.names)} vs "
                f"{_shown(other.names)}"
            )
        diff = describe_difference(self.value, other.value)
        if diff is not None:
            raise ValueError(f"Pullback + Pullback: state structures differ {diff}")
        value, _, _ = _merge_taylor(self.value, None, None, other.value, None, None, order=0)
        return Pullback(self.names, _to_numpy(value), self.grad + other.grad)

    def __radd__(self, other: Any) -> Pullback:
        return self.__add__(other)

    def __repr__(self) -> str:
        return f"Pullback(n_params={len(self.names)}, value={self.value!r})"


def _shown(names: tuple[str, ...], limit: int = 8) -> str:
    if len(names) <= limit:
        return str(list(names))
    return f"{list(names[:limit])[:-1]}... ({len(names)} entries)"


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



# --- derive ---------------------------------------------------------------------------

#: what a raw awkward array combined with a parameter (awkward's own, deprecated JAX
#: backend, not registered here) raises inside ``fn``, instead of awkward's message
AWKWARD_HINT = (
    "stats.derive: fn combines an awkward Array with a parameter; wrap the array first: "
    "stats.from_awkward(events.Jet.pt) (a stats.Jagged; flat arrays: ak.to_numpy(...))"
)


def derive(fn: Callable[[Any], Any], theta: Any, *, order: int = 1) -> Any:
    """Evaluate ``fn(theta)`` with its derivatives: a :class:`Derived`.

    ``theta``: the parameters, any pytree of finite real numbers or arrays (a dict of
    floats, a dict of arrays, an equinox module's parameters; see
    :mod:`analysis.stats._params` for the entry names and their order). ``fn``
    receives the same pytree with float64 JAX leaves and returns a pytree (dicts,
    lists, tuples) whose leaves are states (:func:`~analysis.stats.moments`,
    :func:`~analysis.stats.comoments`, :func:`~analysis.stats.histogram`) or sums (real numbers or arrays). ``order``: 0
    (values only), 1 (Jacobian, default) or 2 (and Hessian), by forward-mode JAX
    (cost and size grow with the number of parameters P). Anything else as a leaf, or
    a non-finite parameter, raises naming it.

    ``theta`` may also be the :class:`PassTheta` that :func:`differentiable` gives
    ``run`` in reverse mode: then ``order`` is ignored and the result is the first
    pass's values (an order-0 :class:`Derived`) or the second pass's
    :class:`Pullback` (one reverse-mode sweep of ``fn``, O(P) memory).
    """
    if order not in (0, 1, 2):
        raise ValueError(f"stats.derive: order: expected 0, 1 or 2, found {order!r}")
    task = theta.task if isinstance(theta, PassTheta) else None
    params = theta.params if isinstance(theta, PassTheta) else theta
    spec = param_spec(params, "stats.derive")
    vec = numpy_vector(spec, params)
    spec.check_finite(vec, "stats.derive")
    t0 = jnp.asarray(vec)

    def f(t):
        try:
            out = fn(spec.unflatten(t))
        except RuntimeError as err:
            if "ak.jax" not in str(err):
                raise
            raise TypeError(AWKWARD_HINT) from None
        return _checked_states(out, "stats.derive")

    if task == "pullback":
        return _pullback(f, t0, spec.names, theta)
    if task == "values":
        return Derived(spec.names, _to_numpy(_values(f, t0)), at=vec)
    if order == 0:
        return Derived(spec.names, _to_numpy(f(t0)), at=vec)
    value, jac, hess = value_and_derivatives(f, t0, order=order)
    return Derived(spec.names, _to_numpy(value), _to_numpy(jac), _to_numpy(hess), at=vec)


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


def _cached_call(kind: str, closed: Any, extra: Any, build: Callable[[Any], Any], *args: Any):
    """``build(jaxpr)(*args)``, compiled when this structure is met a second time."""
    text = str(closed.jaxpr)
    key = hashlib.sha256(repr((kind, text, extra)).encode()).hexdigest()
    fun = _COMPILED.get(key)
    if fun is None:
        fun = build(closed.jaxpr)
        # a function object in the text (" at 0x...") is never the same twice
        if key in _SEEN and len(_COMPILED) < _COMPILED_MAX and " at 0x" not in text:
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
        return lambda consts, t: jax.core.eval_jaxpr(jaxpr, consts, t)

    flat = _cached_call("values", closed, (out_tree, _signature(consts)), build, consts, t0)
    return jax.tree_util.tree_unflatten(out_tree, flat)


def _pullback(f: Callable[[Any], Any], t0: Any, names: tuple[str, ...], theta: PassTheta):
    """The chunk's states and ``grad <T_bar, T_c(theta)>`` (one reverse sweep)."""
    closed, shapes = jax.make_jaxpr(f, return_shape=True)(t0)
    diff = describe_difference(shapes, theta.merged)
    if diff is not None:
        raise ValueError(
            "stats.derive: the chunk's states differ from the merged states of the "
            f"first pass {diff}"
        )
    out_tree = jax.tree_util.tree_structure(shapes)
    pay, pay_tree = jax.tree_util.tree_flatten(theta.payload)
    consts = list(closed.consts)

    def build(jaxpr):
        def grad_and_states(consts, t, pay):
            def scalar(tt):
                flat = jax.core.eval_jaxpr(jaxpr, consts, tt)
                states = jax.tree_util.tree_unflatten(out_tree, flat)
                return pulled_sum(states, jax.tree_util.tree_unflatten(pay_tree, pay)), flat

            return jax.grad(scalar, has_aux=True)(t)

        return grad_and_states

    extra = (out_tree, pay_tree, [np.shape(p) for p in pay], _signature(consts))
    grad, flat = _cached_call("pullback", closed, extra, build, consts, t0, pay)
    value = jax.tree_util.tree_unflatten(out_tree, flat)
    return Pullback(names, _to_numpy(value), np.asarray(grad, dtype=np.float64))


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

#: ``mode="auto"`` uses forward mode up to this many parameters, reverse mode above
#: (benchmarks/bench_reverse.py: reverse costs two passes, forward one pass whose
#: tangents grow with the number of parameters).
AUTO_FORWARD_MAX = 16

_MODES = ("auto", "forward", "reverse")

_payload = jax.jit(pullback_payload)  # compiled once per merged-state structure

_NO_FORWARD = (
    "stats.differentiable: forward-mode derivatives (jax.jvp, jax.jacfwd, jax.hessian) "
    "of a reverse-mode pass are not available; use stats.differentiable(run, "
    "mode='forward') (with stats.derive(..., order=2) for jax.hessian)"
)


def choose_mode(n_params: int, mode: str = "auto") -> str:
    """``"forward"`` or ``"reverse"``: ``mode`` itself, or for ``"auto"`` forward up to
    :data:`AUTO_FORWARD_MAX` parameters and reverse above (the one rule, also for the
    YAML pipeline and ``optimize``)."""
    if mode not in _MODES:
        raise ValueError(
            f"stats.differentiable: mode: expected 'auto', 'forward' or 'reverse', found {mode!r}"
        )
    if mode != "auto":
        return mode
    return "forward" if n_params <= AUTO_FORWARD_MAX else "reverse"


def _no_forward_derivatives(fun: Callable[..., Any]) -> Callable[..., Any]:
    """``fun`` with a JVP rule that refuses in one line (reverse mode's host calls)."""
    guarded = jax.custom_jvp(fun)

    def refuse(primals, tangents):
        raise ValueError(_NO_FORWARD)

    guarded.defjvp(refuse)
    return guarded


def _shapes(tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(np.shape(a), jnp.float64), tree)


def _agreeing(a: Any, b: Any) -> str | None:
    """Where two merged state pytrees differ beyond rounding (1e-8 relative), or None."""
    pa = jax.tree_util.tree_flatten_with_path(a, is_leaf=is_state)[0]
    pb = jax.tree_util.tree_leaves(b, is_leaf=is_state)
    for (path, x), y in zip(pa, pb, strict=True):
        if is_state(x):  # compare means, not their split into centre and correction
            xs = [x[0], x.mean if hasattr(x, "mean") else x.mean_x] + list(x[3:])
            ys = [y[0], y.mean if hasattr(y, "mean") else y.mean_x] + list(y[3:])
        else:
            xs, ys = [x], [y]
        for u, v in zip(xs, ys, strict=True):
            u, v = np.asarray(u, dtype=np.float64), np.asarray(v, dtype=np.float64)
            finite = np.abs(u[np.isfinite(u)])
            scale = float(finite.max()) if finite.size else 0.0
            if not np.allclose(u, v, rtol=1e-8, atol=1e-8 * scale, equal_nan=True):
                return jax.tree_util.keystr(path) or "the root"
    return None


def differentiable(
    run: Callable[[Any], Any], *, mode: str = "auto"
) -> Callable[[Any], Any]:
    """A JAX function ``f(theta) -> merged states`` whose derivatives come from ``run``.

    ``run(theta)`` is typically one coffea ``Runner`` call whose processor returns
    ``stats.derive(fn, self.theta)`` per chunk (:class:`Derived` or, in reverse mode,
    :class:`Pullback` merged by ``processor.accumulate``). ``theta``: any pytree of
    parameters (see :func:`derive`); ``f`` returns the merged ``value`` as JAX arrays.
    ``jax.grad``, ``jax.value_and_grad`` and ``jax.jit`` of any loss of ``f(theta)`` work
    in both modes:

    * ``mode="forward"``: ``run`` receives the parameters (numpy leaves) and returns
      the merged Jacobian (and Hessian): the JVP of ``f`` (custom JVPs, which JAX
      transposes for ``jax.grad``). One pass per new ``theta``; ``jax.hessian`` works
      when ``run`` returns ``order=2`` states. Cost and size grow with the number of
      parameters P.
    * ``mode="reverse"``: ``run`` receives a :class:`PassTheta`. The value is a first
      pass of values only; ``jax.grad`` pulls the cotangent of the merged states back
      through a second pass, each chunk returning one O(P) vector (exact for any
      chunking and executor: :mod:`analysis.stats.pullback` gives the formula). Two
      passes per gradient, independent of P. ``jax.hessian`` (and any forward-mode
      derivative) refuses in one line.
    * ``mode="auto"`` (default): forward up to :data:`AUTO_FORWARD_MAX` parameters,
      reverse above.

    The last pass's result is reused at the same ``theta``. Under ``jax.jit`` ``run``
    is called back from the compiled code (``jax.pure_callback``), which needs the
    output structure: call ``f`` once outside ``jit`` first, otherwise a ``ValueError``
    says so. ``f.passes()`` counts the calls of ``run``; ``f.mode_for(theta)`` says
    which mode ``theta`` gets.
    """
    choose_mode(1, mode)  # checks mode
    memo: dict[str, Any] = {"passes": 0}
    fwd_memo: dict[str, Any] = {}
    rev_memo: dict[str, Any] = {}

    def call(arg: Any) -> Any:
        memo["passes"] += 1
        return run(arg)

    def vector(t: Any, spec: ParamSpec) -> np.ndarray:
        vec = np.asarray(t, dtype=np.float64).reshape(-1)
        spec.check_finite(vec, "stats.differentiable")
        return vec

    def check_names(out: Any, spec: ParamSpec) -> None:
        if out.names != spec.names:
            raise ValueError(
                "stats.differentiable: run(theta) returned derivatives w.r.t. "
                f"{_shown(out.names)}; expected the keys of theta {_shown(spec.names)}"
            )

    # forward mode ------------------------------------------------------------------

    def host(t: Any, spec: ParamSpec) -> Derived:
        vec = vector(t, spec)
        key = (spec.key, vec.tobytes())
        if fwd_memo.get("key") != key:
            out = call(spec.unflatten(vec, as_numpy=True))
            if not isinstance(out, Derived):
                raise TypeError(
                    f"stats.differentiable: run(theta) returned a {type(out).__name__}; "
                    "expected a stats.Derived (e.g. the merged output of one dataset)"
                )
            check_names(out, spec)
            if out.order < 1:
                raise ValueError(
                    "stats.differentiable: run(theta) returned a Derived without derivatives"
                )
            fwd_memo.update(key=key, derived=out)
            fwd_memo["structure"] = {
                part: _shapes(getattr(out, part)) for part in ("value", "jac", "hess")
            }
            memo["value"] = fwd_memo["structure"]["value"]
        return fwd_memo["derived"]

    def leaves(t: Any, spec: ParamSpec, part: str) -> list:
        if not isinstance(t, jax.core.Tracer):
            return [jnp.asarray(a) for a in jax.tree_util.tree_leaves(getattr(host(t, spec), part))]
        if "structure" not in fwd_memo:
            raise ValueError(
                "stats.differentiable: under jax.jit the output structure of run is not known yet; "
                "call f(theta) once outside jax.jit first"
            )
        shapes = jax.tree_util.tree_leaves(fwd_memo["structure"][part])
        return jax.pure_callback(
            lambda tt: [
                np.asarray(a, dtype=np.float64)
                for a in jax.tree_util.tree_leaves(getattr(host(tt, spec), part))
            ],
            shapes,
            t,
            vmap_method="sequential",
        )

    def make_forward(spec: ParamSpec):
        def hess_fn(t):
            if fwd_memo.get("derived") is not None and fwd_memo["derived"].order < 2:
                raise ValueError(
                    "stats.differentiable: second derivatives need run(theta) to return "
                    "stats.derive(..., order=2) states"
                )
            return leaves(t, spec, "hess")

        @jax.custom_jvp
        def jac_fn(t):
            return leaves(t, spec, "jac")

        @jac_fn.defjvp
        def _jac_jvp(primals, tangents):
            (t,), (dt,) = primals, tangents
            return jac_fn(t), [h @ dt for h in hess_fn(t)]

        @jax.custom_jvp
        def value_fn(t):
            return leaves(t, spec, "value")

        @value_fn.defjvp
        def _value_jvp(primals, tangents):
            (t,), (dt,) = primals, tangents
            return value_fn(t), [j @ dt for j in jac_fn(t)]

        return value_fn

    # reverse mode ------------------------------------------------------------------

    def lost(out: Any) -> ValueError:
        return ValueError(
            f"stats.differentiable(mode='reverse'): run(theta) returned a {type(out).__name__}"
            + (f" of order {out.order}" if isinstance(out, Derived) else "")
            + "; pass the theta given to run unchanged to stats.derive (it carries the "
            "pass's task to the workers), or use mode='forward'"
        )

    def host_values(t: Any, spec: ParamSpec) -> Any:
        vec = vector(t, spec)
        key = (spec.key, vec.tobytes())
        if rev_memo.get("key") != key:
            out = call(PassTheta(spec.unflatten(vec, as_numpy=True), "values"))
            if not isinstance(out, Derived) or out.order != 0:
                raise lost(out)
            check_names(out, spec)
            rev_memo.update(key=key, merged=out.value)
            memo["value"] = _shapes(out.value)
        return rev_memo["merged"]

    def host_pullback(t: Any, cts: list, spec: ParamSpec) -> np.ndarray:
        merged = host_values(t, spec)
        vec = vector(t, spec)
        cotangent = jax.tree_util.tree_unflatten(
            jax.tree_util.tree_structure(merged), [np.asarray(c, dtype=np.float64) for c in cts]
        )
        payload = prune(_to_numpy(_payload(merged, cotangent)))  # zero cotangents: no sweep
        out = call(
            PassTheta(spec.unflatten(vec, as_numpy=True), "pullback", merged, payload)
        )
        if not isinstance(out, Pullback):
            raise lost(out)
        check_names(out, spec)
        where = _agreeing(out.value, merged)
        if where is not None:
            raise ValueError(
                "stats.differentiable(mode='reverse'): run(theta) gave different states in "
                f"its two passes at {where}; the pass must be deterministic"
            )
        return out.grad

    def structure() -> Any:
        if "value" not in memo:
            raise ValueError(
                "stats.differentiable: under jax.jit the output structure of run is not known yet; "
                "call f(theta) once outside jax.jit first"
            )
        return jax.tree_util.tree_leaves(memo["value"])

    def make_reverse(spec: ParamSpec):
        @_no_forward_derivatives
        def values(t):
            if not isinstance(t, jax.core.Tracer):
                return [jnp.asarray(a) for a in jax.tree_util.tree_leaves(host_values(t, spec))]
            return jax.pure_callback(
                lambda tt: [
                    np.asarray(a, dtype=np.float64)
                    for a in jax.tree_util.tree_leaves(host_values(tt, spec))
                ],
                structure(),
                t,
                vmap_method="sequential",
            )

        @_no_forward_derivatives
        def pull(t, cts):
            if not any(isinstance(a, jax.core.Tracer) for a in [t, *cts]):
                return jnp.asarray(host_pullback(t, list(cts), spec))
            return jax.pure_callback(
                lambda tt, cc: host_pullback(tt, list(cc), spec),
                jax.ShapeDtypeStruct((spec.size,), jnp.float64),
                t,
                list(cts),
                vmap_method="sequential",
            )

        @jax.custom_vjp
        def value_fn(t):
            return values(t)

        def fwd(t):
            return values(t), t

        def bwd(t, cts):
            return (pull(t, list(cts)),)

        value_fn.defvjp(fwd, bwd)
        return value_fn

    fns: dict[Any, Any] = {}

    def chosen(spec: ParamSpec) -> str:
        return choose_mode(spec.size, mode)

    def f(theta: Any) -> Any:
        spec = param_spec(theta, "stats.differentiable")
        use = chosen(spec)
        if (use, spec.key) not in fns:
            fns[use, spec.key] = (make_forward if use == "forward" else make_reverse)(spec)
        flat = fns[use, spec.key](spec.vector(theta))
        if "value" not in memo:  # only reachable under tracing without structure
            raise ValueError("stats.differentiable: run(theta) has not been evaluated")
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(memo["value"]), flat)

    f.passes = lambda: memo["passes"]  # type: ignore[attr-defined]
    f.mode_for = lambda theta: chosen(param_spec(theta, "stats.differentiable"))  # type: ignore[attr-defined]
    return f
