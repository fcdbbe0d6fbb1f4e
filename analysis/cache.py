"""Column cache across passes: each chunk's columns read once, kept in memory or on disk.

The first pass of an :class:`analysis.runner.Evaluator` reads every chunk from ROOT
(coffea, NanoEvents) and its processor hands back, next to its states, the chunk's
:class:`~analysis.columns.ChunkColumns` in a :class:`ColumnBatch` under the output key
:data:`COLUMNS_KEY`. The driver stores them in a :class:`ColumnCache`; a later pass
whose chunks are all cached evaluates them in the driver's process, without coffea,
uproot or NanoEvents (see :mod:`analysis.runner`).

Key (:func:`chunk_key`): the file's UUID (uproot's ``file.uuid``, the ROOT ``fUUID``),
the tree, the entry range, the branches the plan reads, the weight branch and the
non-finite policy (the cached columns are those left after ``nonfinite: drop``). The
path is not in the key; a file rewritten at the same path has a new UUID, so its old
entries are never used (a new :class:`Evaluator` opens every file and sees the new
UUID; one evaluator checks each file once, when it starts).

Memory: columns are kept in memory up to ``budget`` bytes; beyond that each further
chunk is written to a ``.npz`` file (numpy's own format, read back with
``allow_pickle=False``) in a private temporary directory, removed by :meth:`close`.

Where the columns go: a processor running in the driver's own process (the iterative
executor) puts them straight into the driver's cache (:func:`local_cache`), so that
the budget bounds the memory during the first pass too; in a worker process (futures,
dask) they travel back with the chunk's output, and the driver stores them after the
pass (the first pass then holds all of them at once in the driver).

Only chunks that were read and evaluated without error reach the cache: a failing
chunk's output is just its fault record (:func:`analysis.faults.guarded`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import uuid as uuidlib
import weakref
from typing import Any

import numpy as np

from analysis.columns import ChunkColumns

__all__ = [
    "COLUMNS_KEY",
    "DEFAULT_BUDGET",
    "ColumnBatch",
    "ColumnCache",
    "chunk_key",
    "columns_nbytes",
    "local_cache",
    "plan_branches",
    "uuid_text",
]

#: Output key of the columns a first pass hands back (not a string: never a dataset name).
COLUMNS_KEY = ("diffcoffea", "columns")

#: Default in-memory budget in bytes (``cache_memory_mb`` in the config).
DEFAULT_BUDGET = 1024 * 2**20


def uuid_text(raw: Any) -> str:
    """A file UUID as text: ``bytes`` (uproot's ``fUUID``, coffea's ``WorkItem``) or ``str``."""
    if isinstance(raw, (bytes, bytearray)):
        return str(uuidlib.UUID(bytes=bytes(raw))) if len(raw) == 16 else bytes(raw).hex()
    return str(raw)


def plan_branches(plan: Any) -> str:
    """What ``plan`` reads, as text: the selection collection, its fields, per-event branches.

    Any further reading attribute a plan may grow (``collections``) is included, so a
    config that needs another branch never meets a cache entry without it.
    """
    parts = {
        name: getattr(plan, name)
        for name in ("collection", "object_fields", "event_keys", "collections")
        if hasattr(plan, name)
    }
    sets = getattr(plan, "sets", None)
    if sets is not None:  # object-set plans read ((collection, (field, ...)), ...)
        parts["sets.fields"] = sets.fields
    return repr(sorted(parts.items()))


def chunk_key(
    fileuuid: Any,
    treename: str,
    start: int,
    stop: int,
    *,
    branches: str,
    weight_branch: str | None,
    nonfinite: str,
) -> tuple:
    """The cache key of one chunk (see the module docstring)."""
    return (uuid_text(fileuuid), treename, int(start), int(stop), branches, weight_branch, nonfinite)


def columns_nbytes(cols: ChunkColumns) -> int:
    """Bytes held by the arrays of ``cols``."""
    fields = dataclasses.fields(cols)
    return sum(a.nbytes for f in fields for a in _arrays(getattr(cols, f.name)))


def _arrays(value: Any) -> list[np.ndarray]:
    """Every array in a nest of dicts, tuples and lists (``ChunkColumns.collections``
    holds ``{name: (counts, {field: values})}``)."""
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _arrays(v)]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _arrays(v)]
    return []


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
    np.savez(path, __manifest__=np.array(json.dumps(manifest)), **arrays)


def _load(path: str) -> ChunkColumns:
    with np.load(path, allow_pickle=False) as z:
        manifest = json.loads(str(z["__manifest__"]))
        return ChunkColumns(**{name: _decode(node, z) for name, node in manifest.items()})


class ColumnBatch:
    """Columns of some chunks, ``{key: ChunkColumns}``, addable (``a + b`` merges).

    What a first pass's processor returns under :data:`COLUMNS_KEY`, merged by coffea's
    ``processor.accumulate`` like every other output.
    """

    def __init__(self, columns: dict[tuple, ChunkColumns] | None = None) -> None:
        self.columns = dict(columns or {})

    def __add__(self, other: ColumnBatch) -> ColumnBatch:
        if not isinstance(other, ColumnBatch):
            return NotImplemented
        return ColumnBatch({**self.columns, **other.columns})

    def __len__(self) -> int:
        return len(self.columns)


# Caches of this process by token; a forked worker inherits the dict, so the pid is checked.
_LOCAL: weakref.WeakValueDictionary[str, ColumnCache] = weakref.WeakValueDictionary()


def local_cache(token: str | None) -> ColumnCache | None:
    """The cache ``token`` names if it lives in this process (not in a forked copy)."""
    cache = _LOCAL.get(token) if token else None
    return cache if cache is not None and cache.pid == os.getpid() else None


class ColumnCache:
    """Chunk columns by :func:`chunk_key`: in memory up to ``budget`` bytes, then on disk.

    ``spill_dir``: where the ``.npz`` files go (default: a new temporary directory).
    ``reads`` counts the columns handed out from disk, for tests and benchmarks.
    """

    def __init__(self, *, budget: int = DEFAULT_BUDGET, spill_dir: str | None = None) -> None:
        self.budget = int(budget)
        self._memory: dict[tuple, ChunkColumns] = {}
        self._disk: dict[tuple, str] = {}
        self.memory_bytes = 0
        self._spill_root = spill_dir
        self._spill_dir: str | None = None
        self.reads = 0
        self.pid = os.getpid()
        #: names this cache to processors running in this process (see :func:`local_cache`)
        self.token = uuidlib.uuid4().hex
        _LOCAL[self.token] = self

    def __contains__(self, key: tuple) -> bool:
        return key in self._memory or key in self._disk

    def __len__(self) -> int:
        return len(self._memory) + len(self._disk)

    @property
    def spilled(self) -> int:
        """Number of chunks kept on disk."""
        return len(self._disk)

    def put(self, key: tuple, cols: ChunkColumns) -> None:
        """Keep ``cols`` under ``key`` (in memory if it fits the budget, else on disk)."""
        if key in self:
            return
        cols = dataclasses.replace(
            cols, **{f.name: _own(getattr(cols, f.name)) for f in dataclasses.fields(cols)}
        )
        n = columns_nbytes(cols)
        if self.memory_bytes + n <= self.budget:
            self._memory[key] = cols
            self.memory_bytes += n
            return
        if self._spill_dir is None:
            if self._spill_root is not None:
                os.makedirs(self._spill_root, exist_ok=True)
            self._spill_dir = tempfile.mkdtemp(prefix="diffcoffea-cache-", dir=self._spill_root)
        path = os.path.join(self._spill_dir, f"chunk{len(self._disk)}.npz")
        _save(path, cols)
        self._disk[key] = path

    def get(self, key: tuple) -> ChunkColumns:
        """The columns under ``key`` (``KeyError`` if absent)."""
        if key in self._memory:
            return self._memory[key]
        path = self._disk[key]
        self.reads += 1
        return _load(path)

    def close(self) -> None:
        """Forget every entry and remove the spill directory."""
        self._memory.clear()
        self._disk.clear()
        self.memory_bytes = 0
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None
