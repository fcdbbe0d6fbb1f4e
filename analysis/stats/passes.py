"""One reverse-mode pass's task and result: :class:`PassTheta` and :class:`Pullback`.

:func:`analysis.stats.derive.differentiable` hands ``run`` a :class:`PassTheta` in
reverse mode; :func:`analysis.stats.derive.derive` returns a :class:`Pullback` (the
chunk's states and its O(P) share of the gradient, float64) in the second pass. See
:mod:`analysis.stats.derive` for the overview. Split out of it; it re-exports every name.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from analysis.stats.merge import describe_difference
from analysis.stats.taylor import _merge_taylor, _to_numpy

__all__ = ["PassTheta", "Pullback"]


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

    Parameters
    ----------
    params : pytree
        The parameters (numpy float64 leaves).
    task : str
        ``"values"`` or ``"pullback"`` (else ``ValueError``).
    merged : pytree or None, optional
        The first pass's merged states (for ``task="pullback"``).
    payload : object or None, optional
        What every chunk of the second pass needs to pull back the cotangent
        (:func:`analysis.stats.pullback.pullback_payload`).
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

    Parameters
    ----------
    names : sequence of str
        The parameter entries (P names, in the order of ``grad``).
    value : pytree
        The chunk's states and sums (float64).
    grad : array
        ``(P,)`` the chunk's share of the gradient (stored as numpy float64).
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
