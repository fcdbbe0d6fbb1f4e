"""Reading awkward arrays: the flat values and list offsets of an awkward layout.

:func:`awkward_parts` turns an awkward array of at most one level of lists
(ListOffsetArray, ListArray, RegularArray and IndexedArray layouts, also after event
masking or a jagged mask) into ``(values, offsets)``; :func:`analysis.stats.jagged.from_awkward`
makes a :class:`~analysis.stats.jagged.Jagged` of them. On awkward's JAX backend the data
buffer may be a tracer (inside ``jax.grad``): it is only gathered, so gradients flow back
to the awkward array. Index buffers are concrete (awkward keeps them out of the pytree
leaves), and are read with numpy. :func:`records_error` is the one error for records where
numbers are expected (shared with :mod:`analysis.stats._shadow`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats.offsets import _check_real


def _is_awkward(obj: Any) -> bool:
    mod = type(obj).__module__
    return mod.startswith("awkward.") or mod == "awkward"


def _leaf(content: Any, name: str) -> tuple[Any, np.ndarray | None]:
    """Flat numeric buffer of an element-level layout, plus an optional gather index."""
    if content.is_unknown:  # EmptyArray: lists that are all empty
        return np.zeros(0, dtype=np.float64), None
    if type(content).__name__ == "UnmaskedArray":  # option type with nothing missing
        return _leaf(content.content, name)
    if content.is_option:
        raise TypeError(
            f"{name}: missing values (None) are not supported; "
            "use ak.drop_none or ak.fill_none first"
        )
    if content.is_indexed:  # IndexedArray without missing values: a lazy gather
        data, inner = _leaf(content.content, name)
        index = np.asarray(content.index.data).astype(np.int64, copy=False)
        return data, index if inner is None else inner[index]
    if content.is_numpy:
        data = content.data
        if len(data.shape) != 1:
            raise ValueError(
                f"{name}: expected numbers inside the lists, found nested dimensions "
                f"(element shape {tuple(data.shape[1:])})"
            )
        _check_real(data.dtype, name)
        return data, None
    if content.is_record:
        raise records_error(content, name)
    if content.is_list:
        raise ValueError(f"{name}: expected at most one level of lists, found deeper nesting")
    raise TypeError(f"{name}: unsupported awkward layout {type(content).__name__}")


def records_error(node: Any, name: str) -> TypeError:
    """The error for records where numbers are expected (shared with the awkward engine)."""
    fields = ", ".join(node.fields)
    return TypeError(
        f"{name}: expected numbers, found records with fields ({fields}); "
        "pass one field, e.g. jets.pt"
    )


def _list_bounds(layout: Any, name: str) -> tuple[np.ndarray, np.ndarray, Any] | None:
    """``(starts, stops, content)`` of a list layout (through IndexedArrays); None if flat."""
    if layout.is_indexed and not layout.is_option:
        inner = _list_bounds(layout.content, name)
        if inner is None:
            return None
        index = np.asarray(layout.index.data).astype(np.int64, copy=False)
        return inner[0][index], inner[1][index], inner[2]
    if type(layout).__name__ == "UnmaskedArray":
        return _list_bounds(layout.content, name)
    if layout.is_option:
        raise TypeError(
            f"{name}: missing lists (None) are not supported; use ak.drop_none or ak.fill_none"
        )
    if layout.parameter("__array__") in ("string", "bytestring", "char", "byte"):
        raise TypeError(f"{name}: expected numbers, found strings")
    if layout.is_regular:
        size = int(layout.size)
        starts = np.arange(layout.length, dtype=np.int64) * size
        return starts, starts + size, layout.content
    if layout.is_list:
        if hasattr(layout, "offsets"):
            off = np.asarray(layout.offsets.data).astype(np.int64, copy=False)
            return off[:-1], off[1:], layout.content
        starts = np.asarray(layout.starts.data).astype(np.int64, copy=False)
        stops = np.asarray(layout.stops.data).astype(np.int64, copy=False)
        return starts, stops, layout.content
    if layout.is_numpy and len(layout.data.shape) == 2:
        return _list_bounds(layout.to_RegularArray(), name)
    return None


def awkward_parts(array: Any, name: str = "array") -> tuple[Any, np.ndarray | None]:
    """``(values, offsets)`` of an awkward array; ``offsets`` is None for a flat array.

    ``values`` is in the input dtype: numpy on awkward's numpy backend, a JAX array
    (possibly a tracer) on its JAX backend; ``offsets`` is numpy int64 starting at 0.
    """
    import awkward as ak

    layout = ak.to_layout(array)
    backend = ak.backend(layout)
    if backend not in ("cpu", "jax"):
        raise TypeError(f"{name}: awkward backend {backend!r} is not supported (cpu or jax)")
    bounds = _list_bounds(layout, name)
    if bounds is None:
        data, index = _leaf(layout, name)
        offsets = None
        positions: np.ndarray | slice | None = index
    else:
        starts, stops, content = bounds
        counts = stops - starts
        offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        data, index = _leaf(content, name)
        contiguous = counts.shape[0] == 0 or bool(np.all(starts[1:] == stops[:-1]))
        if contiguous and index is None:
            lo = int(starts[0]) if counts.shape[0] else 0
            hi = lo + int(offsets[-1])
            positions = None if (lo == 0 and hi == data.shape[0]) else slice(lo, hi)
        else:
            # element k of list i sits at starts[i] + k
            positions = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1])
            if index is not None:
                positions = index[positions]
    buffer: np.ndarray | jax.Array
    if backend == "cpu":
        buffer = np.asarray(data)
    else:
        buffer = data if isinstance(data, jax.Array) else jnp.asarray(data)
    values = buffer if positions is None else buffer[positions]
    return values, offsets
