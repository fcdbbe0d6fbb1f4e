"""A chunk's columns as plain data: their size, their own copies, and a ``.npz`` file
(numpy's format with a JSON manifest; read back with ``allow_pickle=False``) where
:class:`analysis.data.cache.ColumnCache` spills them beyond its memory budget."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from analysis.data.atomic import atomic_open
from analysis.pipeline.layout import ChunkColumns

__all__ = ["columns_nbytes"]


def columns_nbytes(cols: ChunkColumns) -> int:
    """Bytes held by the arrays of ``cols`` (:meth:`ChunkColumns.nbytes`)."""
    return cols.nbytes()


def _own(value: Any) -> Any:
    """``value`` with every array its own copy (a view would keep a whole chunk's
    NanoEvents buffers alive and hide their size from the budget)."""
    if isinstance(value, np.ndarray):
        return value if value.base is None else value.copy()
    if isinstance(value, dict):
        return {k: _own(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_own(v) for v in value)
    return value


def _encode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """A JSON manifest of ``value``; its arrays go to ``arrays`` (data only, no pickle)."""
    if isinstance(value, np.ndarray):
        arrays[f"a{len(arrays)}"] = value
        return ["array", f"a{len(arrays) - 1}"]
    if isinstance(value, dict):
        return ["dict", {str(k): _encode(v, arrays) for k, v in value.items()}]
    if isinstance(value, (tuple, list)):
        return ["tuple", [_encode(v, arrays) for v in value]]
    return ["json", value]  # None, int, str


def _decode(node: Any, z: Any) -> Any:
    kind, what = node
    if kind == "array":
        return z[what]
    if kind == "dict":
        return {k: _decode(v, z) for k, v in what.items()}
    if kind == "tuple":
        return tuple(_decode(v, z) for v in what)
    return what


def _save(path: str, cols: ChunkColumns) -> None:
    """``cols`` as a ``.npz`` file; a JSON manifest says how to rebuild the dataclass."""
    arrays: dict[str, np.ndarray] = {}
    manifest = {f.name: _encode(getattr(cols, f.name), arrays) for f in dataclasses.fields(cols)}
    with atomic_open(path, what="cache spill file") as f:  # a full disk: one line
        np.savez(f, __manifest__=np.array(json.dumps(manifest)), **arrays)


def _load(path: str) -> ChunkColumns:
    with np.load(path, allow_pickle=False) as z:
        manifest = json.loads(str(z["__manifest__"]))
        return ChunkColumns(**{name: _decode(node, z) for name, node in manifest.items()})
