"""List offsets of a :class:`~analysis.stats.jagged.Jagged`, on the host and under tracing.

* Concrete or traced arrays: :func:`concrete` (numpy if known now), :func:`device_array`
  (a host-to-device copy without a per-shape staging program), and :func:`_eager`,
  which runs the arithmetic of concrete operands in numpy (no per-shape compilation).
* Segment ids: :func:`segment_ids_from_offsets` (list index of every element, numpy for
  concrete offsets, a prefix sum for traced ones), :func:`padded_segment_ids` (the same
  on the host for a padded chunk) and :func:`lists_mismatch` (why two offsets differ).
* What a compiled :func:`analysis.stats.derive` records while tracing a chunk's padded
  Jagged: the longest list (:func:`bound_longest`, read by :func:`longest_bound`), the
  segment ids (:func:`know_segment_ids`), dropped by :func:`forget_bounds`; reading
  padded values from outside the package raises :class:`PaddedValuesError`
  (:func:`refuse_padded`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis._compat.jax import Tracer


def device_array(a: Any) -> jax.Array:
    """``a`` (numpy, list, number) as a JAX array by a host-to-device copy: ``jnp.asarray``
    of a numpy array compiles a staging program once per new shape (once per chunk of a
    pass), ``jax.device_put`` does not."""
    return a if isinstance(a, jax.Array) else jax.device_put(np.asarray(a))


def concrete(a: Any) -> np.ndarray | None:
    """``a`` as a numpy array if its value is known now, ``None`` if it is a JAX tracer."""
    if isinstance(a, Tracer):
        return None
    return np.asarray(a)


def segment_ids_from_offsets(offsets: Any, num_elements: int) -> Any:
    """List index of every element (int32, length ``num_elements``).

    Concrete offsets give a numpy constant; traced offsets (a ``Jagged`` passed as a
    ``jit`` argument) a JAX computation: a scatter of +1 at each list start, then a
    cumulative sum (empty lists add several +1 at one position; starts equal to
    ``num_elements`` belong to trailing empty lists and are dropped).
    """
    off = concrete(offsets)
    if off is not None:
        counts = np.diff(off)
        return np.repeat(np.arange(counts.shape[0], dtype=np.int32), counts)
    known = _known_ids().get(id(offsets))
    if known is not None and known[0] is offsets and known[1].shape[0] == num_elements:
        return known[1]
    # +1 at every list end (not only the inner ones): elements beyond offsets[-1] (the
    # padding of a compiled stats.derive) get num_lists, which segment sums drop.
    starts = jnp.zeros(num_elements, dtype=jnp.int32).at[offsets[1:]].add(1, mode="drop")
    if num_elements == 0:
        return starts
    # A parallel prefix sum (exact in integers): XLA's CPU cumsum, a reduce-window, took
    # 2.9 ms for 424k elements (a 50k-event chunk's jets), this 0.9 ms.
    return jax.lax.associative_scan(jnp.add, starts)


# Traced offsets whose longest list is known on the host: stats.derive's compiled path
# passes a chunk's Jagged as arguments (its offsets traced) and records here the
# longest list, rounded up, that analysis.soft.pass_weights needs as a static size.
# id -> (the offsets tracer, kept alive so that its id is not reused; the bound), per
# thread (dask's threaded workers trace chunks at the same time).
_BOUNDS = threading.local()


def _longest() -> dict[int, tuple[Any, int]]:
    if not hasattr(_BOUNDS, "table"):
        _BOUNDS.table = {}
    return _BOUNDS.table


def longest_bound(offsets: Any) -> int | None:
    """An upper bound of the longest list of ``offsets``: computed for concrete offsets,
    recorded (:func:`bound_longest`) for traced ones, else ``None``."""
    off = concrete(offsets)
    if off is not None:
        return int(np.max(np.diff(off))) if off.shape[0] > 1 else 0
    hit = _longest().get(id(offsets))
    return hit[1] if hit is not None and hit[0] is offsets else None


def _padded(offsets: Any) -> bool:
    """``offsets`` are those of a padded Jagged of a compiled stats.derive (traced, with
    a recorded bound: :func:`bound_longest`)."""
    if not isinstance(offsets, Tracer):
        return False
    hit = _longest().get(id(offsets))
    return hit is not None and hit[0] is offsets


def _inside_package(frame: Any) -> bool:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name == "analysis" or name.startswith("analysis.")


class PaddedValuesError(ValueError):
    """``Jagged.values`` read by your code inside a compiled ``stats.derive`` (padded)."""


def refuse_padded(offsets: Any) -> None:
    """Raise :class:`PaddedValuesError` when ``Jagged.values`` of the padded ``offsets``
    (:func:`_padded`) is read from outside this package (the caller of the property)."""
    if _padded(offsets) and not _inside_package(sys._getframe(2)):
        raise PaddedValuesError(
            "Jagged.values: inside a compiled stats.derive the values are padded beyond "
            "offsets[-1]; use stats functions, Jagged arithmetic or .map on the Jagged")


def bound_longest(offsets: Any, bound: int) -> None:
    """Record ``bound`` as the longest list of the traced ``offsets`` (while tracing)."""
    _longest()[id(offsets)] = (offsets, int(bound))


def _known_ids() -> dict[int, tuple[Any, Any]]:
    if not hasattr(_BOUNDS, "ids"):
        _BOUNDS.ids = {}
    return _BOUNDS.ids


def padded_segment_ids(offsets: np.ndarray, size: int) -> np.ndarray:
    """The list index of each of ``size`` elements (int32) for concrete ``offsets``,
    ``num_lists`` beyond ``offsets[-1]`` (the padding): what
    :func:`segment_ids_from_offsets` computes for traced offsets, on the host."""
    counts = np.diff(offsets)
    ids = np.full(size, counts.shape[0], dtype=np.int32)
    ids[: int(offsets[-1])] = np.repeat(np.arange(counts.shape[0], dtype=np.int32), counts)
    return ids


def know_segment_ids(offsets: Any, ids: Any) -> None:
    """Record ``ids`` (:func:`padded_segment_ids`, an argument of the compiled program)
    as the segment ids of the traced ``offsets`` (while tracing): the program then
    reads them instead of computing a prefix sum over the elements (a parallel scan of
    ~20 levels, about 2 s of XLA compilation per program for a 50k-event chunk)."""
    _known_ids()[id(offsets)] = (offsets, ids)


def forget_bounds() -> None:
    """Drop the recorded bounds and segment ids (after a trace)."""
    _longest().clear()
    _known_ids().clear()


def _check_real(dtype: Any, what: str) -> None:
    kind = np.dtype(dtype).kind
    if kind not in "biuf":
        raise TypeError(f"{what}: expected real numbers (bool, int or float), found dtype {dtype}")


# --- eager arithmetic on concrete values --------------------------------------------

# Outside a trace, each jnp operation compiles once per new array length (a chunk's
# column preparation, ``abs(stats.from_awkward(events.Jet.eta))``, would compile on every
# chunk of a first pass): concrete operands are computed by numpy's ufunc of the same
# name (the same IEEE float64 operation), traced ones by jnp.
_NUMPY = {
    jnp.add: np.add, jnp.subtract: np.subtract, jnp.multiply: np.multiply,
    jnp.true_divide: np.true_divide, jnp.power: np.power, jnp.less: np.less,
    jnp.less_equal: np.less_equal, jnp.greater: np.greater,
    jnp.greater_equal: np.greater_equal, jnp.equal: np.equal, jnp.not_equal: np.not_equal,
    jnp.negative: np.negative, jnp.abs: np.abs,
}


def _eager(op: Callable[..., Any], *args: Any) -> Any:
    """``op(*args)``; by numpy when every operand is concrete (no per-shape compilation)."""
    if any(isinstance(a, Tracer) for a in args):
        return op(*args)
    arrays = [np.asarray(a) if isinstance(a, jax.Array) else a for a in args]
    return device_array(_NUMPY[op](*arrays))


# --- comparing lists ----------------------------------------------------------------


def lists_mismatch(a: Any, b: Any) -> str | None:
    """Why offsets ``b`` do not describe the lists of offsets ``a`` (``None``: they do,
    or cannot be told apart because one is traced and the shapes agree)."""
    na, nb = a.shape[0] - 1, b.shape[0] - 1
    if na != nb:
        return f"{nb} lists where {na} are expected"
    if a is b:
        return None
    oa, ob = concrete(a), concrete(b)
    if oa is None or ob is None:
        return None
    if not np.array_equal(oa, ob):
        i = int(np.flatnonzero(np.diff(oa) != np.diff(ob))[0])
        return (f"list {i} has {int(ob[i + 1] - ob[i])} elements where "
                f"{int(oa[i + 1] - oa[i])} are expected")
    return None
