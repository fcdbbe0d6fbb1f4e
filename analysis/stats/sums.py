"""``stats.sum``: the weighted sum ``sum_i w_i x_i``, as ``ak.sum(x * weight, axis)``.

The per-event sums a processor writes (HT of the jets weighed by their pass
probabilities, ``stats.sum(pt, weight=p, axis=1)``) inside the function it gives
:func:`analysis.stats.derive`, without reading ``Jagged.values``: in derive's compiled
program a :class:`~analysis.stats.Jagged` is padded beyond ``offsets[-1]`` and the sum
gives the padding weight 0 (:mod:`analysis.stats._closure`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats._inputs import _traced
from analysis.stats.jagged import Jagged, _operand, from_awkward
from analysis.stats.layouts import _is_awkward
from analysis.stats.offsets import concrete, device_array

__all__ = ["sum"]


def _jagged_sum(x: Jagged, weight: Any, axis: Any) -> jax.Array:
    """The sum of a Jagged ``x`` with ``weight`` broadcast as Jagged arithmetic does."""
    if axis not in (None, 0, 1, -1, -2):
        raise ValueError(f"stats.sum: axis: expected None, 0, 1, -1 or -2 for a Jagged, "
                         f"found {axis!r}")
    values = x.values
    if weight is not None:
        w = _operand(x, weight, "stats.sum weight")
        if w is NotImplemented:
            raise TypeError(f"stats.sum: weight: expected a Jagged, an awkward Array, an array "
                            f"or a number, found {type(weight).__name__}")
        values = values.astype(jnp.float64) * w if _traced(values, w) else \
            np.asarray(values, dtype=np.float64) * np.asarray(w, dtype=np.float64)
    ids = x.segment_ids()  # traced offsets: the padding gets num_lists, which is dropped
    n_lists = x.num_lists
    if axis in (0, -2):
        off = concrete(x.offsets)
        if off is None:
            raise ValueError("stats.sum: axis=0 (position by position) needs concrete "
                             "offsets (a Jagged made outside the traced function)")
        ids = np.arange(off[-1]) - np.repeat(off[:-1], np.diff(off))  # position in its list
        n_lists = int(np.max(np.diff(off))) if off.shape[0] > 1 else 0
    if not _traced(values, ids):
        # concrete data: numpy (an eager jnp reduction compiles once per new length)
        v = np.asarray(values, dtype=np.float64)
        if axis is None:
            return device_array(np.float64(np.sum(v)))
        return device_array(np.bincount(np.asarray(ids), weights=v, minlength=n_lists)
                            .astype(np.float64))
    vt = jnp.asarray(values, dtype=jnp.float64)
    per_list = jax.ops.segment_sum(vt, ids, num_segments=n_lists)
    return jnp.sum(per_list) if axis is None else per_list


def sum(x: Any, weight: Any = None, axis: int | None = None) -> Any:  # noqa: A001
    """Weighted sum ``sum_i w_i x_i`` per group, as ``ak.sum(x * weight, axis=axis)``.

    Empty groups sum to 0 (awkward's identity). Everything is float64; NaN and
    infinities propagate as in numpy. Gradients flow to ``x`` and ``weight`` (JAX).

    * :class:`~analysis.stats.Jagged` ``x`` (or a Jagged ``weight`` with an awkward ``x``
      of one level of lists, the same lists): ``weight`` broadcasts as Jagged arithmetic
      does (a Jagged or awkward Array of the same lists, one value per list, a number);
      ``axis`` None (a scalar), 1/-1 (one sum per list: ``(num_lists,)``) or 0/-2
      (position by position; needs concrete offsets). A float64 JAX array. Inside the
      compiled program of :func:`analysis.stats.derive` the padding beyond
      ``offsets[-1]`` counts for nothing.
    * awkward Arrays and lists: ``ak.sum(x * weight, axis=axis)`` with ``x`` upcast to
      float64 (awkward's broadcasting and axes): an awkward Array, or a ``np.float64``
      for ``axis=None``.
    * numpy and JAX arrays: ``sum(x * weight, axis)`` with numpy broadcasting and axes:
      a float64 JAX array.

    Parameters
    ----------
    x : Jagged, awkward Array, list, numpy or JAX array
        The data.
    weight : Jagged, awkward Array, array, float or None, optional
        Weights, broadcast against ``x`` as above. None (default): unit weights.
    axis : int or None, optional
        The axis to sum over; None (default) sums every element to a scalar.

    Returns
    -------
    JAX array, awkward Array or np.float64
        The weighted sum per group (0 for an empty group).
    """
    if isinstance(weight, Jagged) and not isinstance(x, Jagged) and _is_awkward(x):
        x = from_awkward(x)  # awkward and Jagged mixed: the Jagged path, same lists checked
    if isinstance(x, Jagged):
        return _jagged_sum(x, weight, axis)
    if isinstance(weight, Jagged):
        raise TypeError(f"stats.sum: a Jagged weight needs x of the same lists (a Jagged or "
                        f"an awkward Array), found {type(x).__name__}")
    if _is_awkward(x) or isinstance(x, list) or _is_awkward(weight):
        import awkward as ak

        xa = ak.values_astype(ak.Array(x) if isinstance(x, list) else x, np.float64)
        return ak.sum(xa if weight is None else xa * weight, axis=axis)
    if not isinstance(x, (np.ndarray, jax.Array, np.generic, int, float)):
        raise TypeError(f"stats.sum: x: expected a Jagged, an awkward Array, a list or an "
                        f"array, found {type(x).__name__}")
    if _traced(x, weight) or isinstance(x, jax.Array) or isinstance(weight, jax.Array):
        xt = jnp.asarray(x, dtype=jnp.float64)
        return jnp.sum(xt if weight is None else xt * weight, axis=axis)
    xn = np.asarray(x, dtype=np.float64)
    return jnp.asarray(np.sum(xn if weight is None else xn * np.asarray(weight), axis=axis))
