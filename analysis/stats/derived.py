"""Mergeable states with their derivatives: :class:`Derived` and :func:`join`.

Forward mode's carrier (see :mod:`analysis.stats.derive` for the overview): ``value``,
``jac`` and ``hess`` pytrees of float64 numpy arrays; ``a + b`` merges exactly through
the states' Taylor expansions (:mod:`analysis.stats.taylor`). Split out of
:mod:`analysis.stats.derive`, which re-exports every name.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from analysis.stats._programs import program_call
from analysis.stats.merge import describe_difference
from analysis.stats.taylor import _merge_taylor, _symmetric, taylor_derivatives

__all__ = ["Derived", "join"]


# --- Derived --------------------------------------------------------------------------


def _owned(tree: Any) -> Any:
    """``tree`` with numpy float64 leaves; JAX leaves copied out (not views of the JAX
    buffers, which deep copies share)."""
    if tree is None:
        return None
    return jax.tree_util.tree_map(
        lambda a: np.array(a, dtype=np.float64) if isinstance(a, jax.Array)
        else np.asarray(a, dtype=np.float64), tree)


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

    Parameters
    ----------
    names : sequence of str
        The parameter names, in the order of the Jacobian's parameter axis (P entries).
    value : pytree
        States (:class:`Moments`, :class:`CoMoments`, :class:`Histogram`) and sums, with
        float64 leaves.
    jac : pytree or None, optional
        ``value``'s structure with a trailing ``(P,)`` axis on every leaf: ``d value /
        d theta``. None (default) for order 0.
    hess : pytree or None, optional
        ``value``'s structure with trailing ``(P, P)`` axes (symmetrised on
        construction). None (default) below order 2.
    at : sequence of float or None, optional
        Keyword-only. The parameter values the derivatives were taken at (set by
        :func:`derive`; None: unknown); ``a + b`` refuses a mixture of different points.
    """

    __slots__ = ("names", "_value", "_jac", "_pending", "hess", "at")

    def __init__(
        self, names: Any, value: Any, jac: Any = None, hess: Any = None, *, at: Any = None
    ) -> None:
        self.names = tuple(names)
        #: the parameter values the derivatives were taken at (:func:`derive` sets them;
        #: ``None``: unknown). ``a + b`` refuses a mixture of different points.
        self.at = None if at is None else tuple(float(v) for v in at)
        # The leaves may be JAX arrays still being computed (stats.derive's program and
        # the merges run asynchronously: the next chunk is read meanwhile); they become
        # numpy float64 arrays of their own (copies: a deep copy shares the immutable JAX
        # arrays) when value or jac is first read (_settle).
        self._value = value
        self._jac = jac
        self._pending = True
        # Symmetrised: a Taylor expansion (how merges and statistics are differentiated)
        # only sees the symmetric part, so an empty merge now returns it bit for bit.
        self.hess = None if hess is None else jax.tree_util.tree_map(_symmetric, hess)

    def _settle(self) -> None:
        if self._pending:
            self._value, self._jac, self._pending = _owned(self._value), _owned(self._jac), False

    @property
    def value(self) -> Any:
        """The states and sums (numpy float64 leaves)."""
        self._settle()
        return self._value

    @value.setter
    def value(self, tree: Any) -> None:
        self._value = tree

    @property
    def jac(self) -> Any:
        """``value``'s Jacobian (trailing ``(P,)`` axis; numpy float64), or None."""
        self._settle()
        return self._jac

    @jac.setter
    def jac(self, tree: Any) -> None:
        self._jac = tree

    def __getstate__(self) -> tuple:
        return (self.names, self.value, self.jac, self.hess, self.at)

    def __deepcopy__(self, memo: dict) -> Derived:
        """A copy with arrays of its own, leaf by leaf through the pytrees (coffea's
        ``accumulate`` copies a dataset's first output; ``copy.deepcopy``'s generic walk
        costs several times this with hundreds of histogram leaves). JAX arrays are
        immutable: shared, not waited for."""

        def own(leaf: Any) -> Any:
            if isinstance(leaf, jax.Array):
                return leaf
            return leaf.copy() if isinstance(leaf, np.ndarray) else copy.deepcopy(leaf, memo)

        out = Derived.__new__(Derived)
        out.names, out.at, out._pending = self.names, self.at, self._pending
        out._value, out._jac, out.hess = (
            None if t is None else jax.tree_util.tree_map(own, t)
            for t in (self._value, self._jac, self.hess))
        return out

    def __setstate__(self, state: tuple) -> None:
        self.names, self._value, self._jac, self.hess = state[:4]
        self._pending = False  # pickled read (numpy)
        self.at = state[4] if len(state) > 4 else None

    @property
    def order(self) -> int:
        """0 (values only), 1 (Jacobian) or 2 (Jacobian and Hessian)."""
        return 0 if self._jac is None else (1 if self.hess is None else 2)

    @property
    def n_params(self) -> int:
        """Number of parameters P, ``len(names)``."""
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
        diff = describe_difference(self._value, other._value)  # shapes: no waiting
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
        # dispatched, not waited for: the leaves stay JAX arrays until read
        value, jac, hess = program_call(
            "merge_taylor", _merge_taylor, self._value, self._jac, self.hess, other._value,
            other._jac, other.hess, order=self.order,
        )
        return Derived(self.names, value, jac, hess,
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


def join(parts: Mapping[str, Derived]) -> Derived:
    """One :class:`Derived` of several: value ``{key: parts[key].value}``, and the same
    for the Jacobian and Hessian. For a processor's output ``{dataset: Derived}``, so
    that one :func:`differentiable` pass (or one ``value_and_grad``) sees every dataset.
    The parts must have the same parameter names and order (else ``ValueError``).

    Parameters
    ----------
    parts : Mapping[str, Derived]
        The parts by key (e.g. ``{dataset: Derived}``), all with the same parameter names
        in the same order and the same order of derivatives.

    Returns
    -------
    Derived
        ``value = {key: parts[key].value}``, ``jac`` and ``hess`` likewise, with the
        parts' ``names``. Raises ``ValueError`` for differing names or orders,
        ``TypeError`` for an empty mapping or a part that is not a :class:`Derived`.
    """
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
