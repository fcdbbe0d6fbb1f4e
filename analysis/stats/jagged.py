"""A minimal jagged (list-of-lists) array for JAX, and conversion from awkward.

:class:`Jagged` is what jit-compiled code uses: a pytree of two leaves,

* ``values``: the flat elements (1-D float JAX array; the differentiable part),
* ``offsets``: list boundaries (1-D int array of length ``num_lists + 1``, starting
  at 0 and ending at ``len(values)``); constant data, never differentiated.

Because both are leaves, ``jax.jit`` retraces only when their *shapes* change, not for
every new chunk of events with the same number of lists and elements; the number of
lists (``len(offsets) - 1``) is therefore static under ``jit``.

:func:`from_awkward` turns an awkward array of one level of lists (``events.Jet.pt``,
also after event masking or a jagged mask) into a :class:`Jagged`, differentiably on
awkward's JAX backend (layouts are read by :mod:`analysis.stats.layouts`; offsets,
segment ids and the bounds a compiled ``stats.derive`` records are in
:mod:`analysis.stats.offsets`). For awkward inputs of any structure (option types, any
depth, regular dimensions) the statistics use :mod:`analysis.stats._shadow`, which lets
awkward itself decide broadcasting, missing values and the grouping of any ``axis``.

A :class:`Jagged` is an array: ``+ - * / **`` (and reflected), comparisons (bool
values), unary ``-`` and ``abs`` work elementwise, with the result on the left operand's
lists. The other operand broadcasts like awkward: a Jagged (or an awkward Array of one
level of lists) needs the same lists (otherwise one ``ValueError`` line names the first
list that differs); a flat array (numpy, JAX or awkward) has one value per list; a number
applies to every element. ``soft_cut(pt, ">", a, 5.0) * soft_cut(eta, "<", b, 0.1)``
is the product of the pass probabilities. ``jnp`` functions go through :meth:`Jagged.map`
(``pt.map(jnp.log)``, ``pt.map(jnp.arctan2, eta)``); :func:`where` selects elementwise.
Everything is JAX on the values, so gradients flow through it and it works under ``jit``
(traced offsets: only the lengths are compared). With traced offsets, values beyond
``offsets[-1]`` are padding (as :func:`analysis.stats.derive` pads a chunk's Jagged to
a bucket size): they belong to no list and every statistic gives them weight 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats.layouts import _is_awkward, awkward_parts
from analysis.stats.offsets import (
    _check_real,
    _eager,
    concrete,
    device_array,
    lists_mismatch,
    refuse_padded,
    segment_ids_from_offsets,
)

__all__ = ["Jagged", "from_awkward", "where"]


@jax.tree_util.register_pytree_node_class
class Jagged:
    """A list of variable-length lists of numbers, stored as flat ``values`` + ``offsets``.

    ``values``: 1-D real array (kept in its dtype; the statistics upcast to float64).
    ``offsets``: 1-D integer array (numpy or JAX), ``offsets[0] == 0``,
    ``offsets[-1] == len(values)``, non-decreasing. List ``i`` is
    ``values[offsets[i]:offsets[i + 1]]``. Zero lists: ``offsets == [0]``.

    Flat weights (and ``y``) given with a ``Jagged`` are per element, aligned with
    ``values``; one weight per list is passed as ``x.expand(w)`` (never guessed from
    lengths). Checks are made in Python when the arrays are concrete (not under tracing).
    Differentiate with respect to ``values`` (e.g. ``jax.grad(lambda v:
    stats.mean(pt.with_values(v)))(pt.values)``): ``offsets`` is an integer leaf, so
    ``jax.grad`` of a whole ``Jagged`` needs ``allow_int=True``.

    Parameters
    ----------
    values : array
        1-D real array of all elements, list after list (numpy or JAX; kept in its dtype).
    offsets : array
        1-D integer array of length ``num_lists + 1`` (numpy or JAX): ``offsets[0] == 0``,
        ``offsets[-1] == len(values)``, non-decreasing. ``ValueError`` / ``TypeError``
        otherwise (checked when concrete).
    """

    __slots__ = ("_values", "offsets", "_segment_ids", "_arguments")
    _segment_ids: np.ndarray | None  # cached for concrete offsets only
    # (values, offsets, what) kept by :meth:`kept`: what a compiled stats.derive passes
    # for this Jagged (analysis.stats._closure), while values and offsets are those objects
    _arguments: tuple[Any, Any, Any] | None

    @property
    def values(self) -> Any:
        """The flat values, list after list (``offsets[-1]`` of them).

        Inside a compiled :func:`analysis.stats.derive` (a chunk's Jagged passed to the
        program as padded arguments, :mod:`analysis.stats._closure`) the stored values
        run on beyond ``offsets[-1]`` with padding, which a reduction of the raw array
        would count (``jnp.mean(pt.values)``): there, reading ``values`` from outside this
        package raises :class:`~analysis.stats.offsets.PaddedValuesError`, and
        ``stats.derive`` runs the function traced on the chunk's own (unpadded) arrays
        instead. The package's own functions (statistics, soft cuts, ``pass_weights``,
        arithmetic) give the padding weight 0.
        """
        refuse_padded(self.offsets)
        return self._values

    @values.setter
    def values(self, values: Any) -> None:
        self._values = values

    def __init__(self, values: Any, offsets: Any) -> None:
        if not isinstance(values, jax.Array):  # tracers are jax.Array too
            values = device_array(values)
        if not isinstance(offsets, jax.Array):
            offsets = np.asarray(offsets)
        if values.ndim != 1:
            raise ValueError(f"Jagged values: expected a 1-D array, found shape {values.shape}")
        _check_real(values.dtype, "Jagged values")
        if offsets.ndim != 1 or offsets.shape[0] < 1:
            raise ValueError(
                f"Jagged offsets: expected a 1-D array of length num_lists + 1 >= 1, "
                f"found shape {offsets.shape}"
            )
        if np.dtype(offsets.dtype).kind not in "iu":
            raise TypeError(f"Jagged offsets: expected integers, found dtype {offsets.dtype}")
        off = concrete(offsets)
        if off is not None:
            n = values.shape[0]
            if off[0] != 0 or off[-1] != n:
                raise ValueError(
                    f"Jagged offsets: expected offsets[0] == 0 and offsets[-1] == len(values) "
                    f"== {n}, found {int(off[0])} and {int(off[-1])}"
                )
            if np.any(np.diff(off) < 0):
                raise ValueError("Jagged offsets: expected non-decreasing offsets")
        self.values = values
        self.offsets = offsets
        self._segment_ids = None
        self._arguments = None

    # --- pytree protocol: both arrays are leaves, nothing static but the shapes ---
    def tree_flatten(self) -> tuple[tuple[Any, Any], None]:
        """JAX pytree protocol: ``((values, offsets), None)``, both leaves."""
        return (self.values, self.offsets), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: tuple[Any, Any]) -> Jagged:
        """JAX pytree protocol: a ``Jagged`` of ``(values, offsets)``, unchecked."""
        # JAX rebuilds pytrees with tracers, None or sentinels as leaves: no checks.
        obj = object.__new__(cls)
        obj._values, obj.offsets = children
        obj._segment_ids = None
        obj._arguments = None
        return obj

    # --- structure -------------------------------------------------------------
    @property
    def num_lists(self) -> int:
        """Number of lists, ``len(offsets) - 1`` (a Python int, static under ``jit``)."""
        return int(self.offsets.shape[0]) - 1

    @property
    def num_elements(self) -> int:
        """Total number of elements, ``len(values)``."""
        return int(self.values.shape[0])

    def __len__(self) -> int:
        return self.num_lists

    @property
    def counts(self) -> Any:
        """Length of each list (numpy for concrete offsets, else JAX)."""
        off = concrete(self.offsets)
        return np.diff(off) if off is not None else jnp.diff(self.offsets)

    def segment_ids(self) -> Any:
        """List index of each element (int32); cached when the offsets are concrete."""
        if self._segment_ids is not None:
            return self._segment_ids
        ids = segment_ids_from_offsets(self.offsets, self.num_elements)
        if isinstance(ids, np.ndarray):
            self._segment_ids = ids
        return ids

    def kept(self, make: Callable[[Any, Any], Any]) -> Any:
        """``make(values, offsets)``, computed once and kept with this ``Jagged`` while its
        ``values`` and ``offsets`` are the same objects (a JAX array's values cannot
        change; offsets are taken as unchanged, as :meth:`segment_ids` does): the
        padded arguments of a compiled :func:`analysis.stats.derive`, which a later pass
        over kept columns (``analysis.data.owncache``) would otherwise make again.

        Parameters
        ----------
        make : callable
            ``make(values, offsets) -> object``, of this Jagged's arrays.

        Returns
        -------
        object
            What ``make`` returned, the first time or now.
        """
        hit = self._arguments
        if hit is not None and hit[0] is self._values and hit[1] is self.offsets:
            return hit[2]
        out = make(self._values, self.offsets)
        self._arguments = (self._values, self.offsets, out)
        return out

    def with_values(self, values: Any) -> Jagged:
        """Same lists, new per-element ``values`` (same length)."""
        values = device_array(values)
        _check_real(values.dtype, "Jagged values")
        if values.shape != self.values.shape:
            raise ValueError(
                f"Jagged.with_values: expected values of shape {self.values.shape}, "
                f"found {values.shape}"
            )
        out = Jagged.tree_unflatten(None, (values, self.offsets))
        out._segment_ids = self._segment_ids
        return out

    def expand(self, per_list: Any) -> Any:
        """One value per list (length ``num_lists``) repeated for every element of the
        list: per-list weights (``events.genWeight``) as per-element weights."""
        per_list = per_list if isinstance(per_list, jax.Array) else np.asarray(per_list)
        if per_list.shape != (self.num_lists,):
            raise ValueError(
                f"Jagged.expand: expected one value per list, shape ({self.num_lists},), "
                f"found {tuple(per_list.shape)}"
            )
        ids = self.segment_ids()
        if isinstance(per_list, jax.Array) or not isinstance(ids, np.ndarray):
            return jnp.asarray(per_list)[ids]
        return per_list[ids]

    def map(self, fn: Callable[..., Any], *others: Any) -> Jagged:
        """Apply an elementwise function to the values: ``pt.map(jnp.log)``,
        ``pt.map(lambda v: (v - c) / 5)``; with ``others`` (Jagged of the same lists,
        scalars, one value per list, awkward Arrays; broadcast as the operators do)
        ``fn(self.values, *their values)``: ``pt.map(jnp.arctan2, eta)``."""
        args = [_operand(self, o, "map") for o in others]
        bad = next((o for o, a in zip(others, args) if a is NotImplemented), None)
        if bad is not None:
            raise TypeError(f"Jagged.map: expected Jagged, awkward, arrays or numbers, "
                            f"found {type(bad).__name__}")
        return self.with_values(fn(self.values, *args))

    # --- elementwise arithmetic (module docstring: broadcasting like awkward) ------
    # numpy and awkward defer to our reflected operators instead of iterating a Jagged
    __array_ufunc__ = None
    __hash__ = None  # type: ignore[assignment]  # == is elementwise

    def _binary(self, other: Any, op: Callable[[Any, Any], Any], name: str) -> Any:
        right = _operand(self, other, name)
        if right is NotImplemented:
            return NotImplemented
        return self.with_values(_eager(op, self.values, right))

    def _reflected(self, other: Any, op: Callable[[Any, Any], Any], name: str) -> Any:
        left = _operand(self, other, name)
        if left is NotImplemented:
            return NotImplemented
        return self.with_values(_eager(op, left, self.values))

    def __add__(self, o: Any) -> Any:
        return self._binary(o, jnp.add, "+")

    def __radd__(self, o: Any) -> Any:
        return self._reflected(o, jnp.add, "+")

    def __sub__(self, o: Any) -> Any:
        return self._binary(o, jnp.subtract, "-")

    def __rsub__(self, o: Any) -> Any:
        return self._reflected(o, jnp.subtract, "-")

    def __mul__(self, o: Any) -> Any:
        return self._binary(o, jnp.multiply, "*")

    def __rmul__(self, o: Any) -> Any:
        return self._reflected(o, jnp.multiply, "*")

    def __truediv__(self, o: Any) -> Any:
        return self._binary(o, jnp.true_divide, "/")

    def __rtruediv__(self, o: Any) -> Any:
        return self._reflected(o, jnp.true_divide, "/")

    def __pow__(self, o: Any) -> Any:
        return self._binary(o, jnp.power, "**")

    def __rpow__(self, o: Any) -> Any:
        return self._reflected(o, jnp.power, "**")

    def __lt__(self, o: Any) -> Any:
        return self._binary(o, jnp.less, "<")

    def __le__(self, o: Any) -> Any:
        return self._binary(o, jnp.less_equal, "<=")

    def __gt__(self, o: Any) -> Any:
        return self._binary(o, jnp.greater, ">")

    def __ge__(self, o: Any) -> Any:
        return self._binary(o, jnp.greater_equal, ">=")

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        return self._binary(o, jnp.equal, "==")

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        return self._binary(o, jnp.not_equal, "!=")

    def __neg__(self) -> Jagged:
        return self.with_values(_eager(jnp.negative, self.values))

    def __pos__(self) -> Jagged:
        return self

    def __abs__(self) -> Jagged:
        return self.with_values(_eager(jnp.abs, self.values))

    def to_awkward(self) -> Any:
        """An awkward array (numpy backend) with the same lists; needs concrete arrays."""
        import awkward as ak

        return ak.unflatten(np.asarray(self.values), np.asarray(self.counts))

    def __repr__(self) -> str:
        return (
            f"Jagged(num_lists={self.num_lists}, num_elements={self.num_elements}, "
            f"dtype={self.values.dtype})"
        )


def _operand(x: Jagged, other: Any, name: str) -> Any:
    """``other`` as per-element values aligned with ``x.values`` (or a scalar), broadcast
    like awkward: a Jagged or awkward Array of lists needs the same lists; a flat array
    (numpy, JAX, awkward) has one value per list; a number applies to all.
    ``NotImplemented`` for types that are none of these."""
    if isinstance(other, Jagged):
        why = lists_mismatch(x.offsets, other.offsets)
        if why is not None:
            raise ValueError(f"Jagged {name}: other operand: {why} (the same lists needed)")
        if other.values.shape != x.values.shape:  # traced offsets: shapes only
            raise ValueError(
                f"Jagged {name}: other operand: {other.values.shape[0]} elements where "
                f"{x.num_elements} are expected (same lists needed)"
            )
        return other.values
    if _is_awkward(other):
        values, offsets = awkward_parts(other, f"Jagged {name}: other operand")
        if offsets is not None:
            return _operand(x, Jagged.tree_unflatten(None, (device_array(values), offsets)), name)
        other = values
    if isinstance(other, (bool, int, float, np.generic)):
        return other
    if isinstance(other, (jax.Array, np.ndarray)):
        if other.ndim == 0:
            return other
        if other.ndim == 1:
            if other.shape[0] != x.num_lists:
                raise ValueError(
                    f"Jagged {name}: a flat operand has one value per list: expected "
                    f"{x.num_lists} values, found {other.shape[0]}"
                )
            return x.expand(other)
        raise ValueError(
            f"Jagged {name}: expected a number, one value per list or the same lists, "
            f"found shape {tuple(other.shape)}"
        )
    return NotImplemented


def where(condition: Any, x: Any, y: Any) -> Jagged:
    """Elementwise ``x`` where ``condition`` holds, else ``y`` (``jnp.where`` on the values).

    Gradients flow to ``x`` and ``y`` only where they are selected (``jnp.where``: pass
    finite values on both sides to keep them finite). Empty input gives empty output.

    Parameters
    ----------
    condition : Jagged, awkward Array, array or bool
        Where to take ``x``. At least one of ``condition``, ``x``, ``y`` is a
        :class:`Jagged`; the others are Jagged of the same lists, awkward Arrays of
        those lists, one value per list (a flat array) or numbers, broadcast as the
        arithmetic operators do.
    x : Jagged, awkward Array, array or number
        The values where ``condition`` holds.
    y : Jagged, awkward Array, array or number
        The values elsewhere.

    Returns
    -------
    Jagged
        The lists of the first Jagged argument, values of the promoted dtype of ``x``
        and ``y``.
    """
    template = next((a for a in (condition, x, y) if isinstance(a, Jagged)), None)
    if template is None:
        raise TypeError("where: expected at least one Jagged among condition, x and y")
    parts = []
    for arg, what in ((condition, "condition"), (x, "x"), (y, "y")):
        v = _operand(template, arg, "where")
        if v is NotImplemented:
            raise TypeError(f"where: {what}: expected a Jagged, an awkward Array, an array or "
                            f"a number, found {type(arg).__name__}")
        parts.append(v)
    return template.with_values(jnp.where(*parts))


def from_awkward(array: Any) -> Jagged:
    """Convert an awkward array of one level of lists of numbers to a :class:`Jagged`.

    Accepts ListOffsetArray, ListArray, RegularArray and IndexedArray layouts (e.g.
    ``events.Jet.pt``, after ``events[mask]`` or ``jets[jets.pt > 30]``) on the numpy
    or JAX backend. Values are upcast to float64 (NanoAOD is float32), so that soft-cut
    weights built from them, ``jax.nn.sigmoid((pt.values - theta) / 5)``, are float64
    too. On the JAX backend they stay differentiable: inside ``jax.grad`` the buffer is
    a tracer, only gathered and cast. Empty input gives a ``Jagged`` with zero lists.
    Raises ``TypeError`` for records, strings, missing values and non-awkward input,
    ``ValueError`` for flat or doubly nested arrays.

    Parameters
    ----------
    array : awkward Array
        One level of lists of numbers (numpy or JAX backend), e.g. ``events.Jet.pt``.

    Returns
    -------
    Jagged
        The same lists: float64 ``values`` and integer ``offsets``; zero lists
        (``offsets == [0]``) for empty input.
    """
    if not _is_awkward(array):
        raise TypeError(f"from_awkward: expected an awkward Array, found {type(array).__name__}")
    values, offsets = awkward_parts(array, "from_awkward")
    if offsets is None:
        raise ValueError(
            "from_awkward: expected one level of lists (e.g. events.Jet.pt), found a flat array; "
            "flat arrays can be passed to the statistics directly"
        )
    if not isinstance(values, jax.Array):
        # cast on the host: an eager jnp cast compiles once per new array length,
        # that is once per chunk of a first pass
        values = np.asarray(values, dtype=np.float64)
        return Jagged.tree_unflatten(None, (device_array(values), offsets))
    return Jagged.tree_unflatten(None, (values.astype(jnp.float64), offsets))
