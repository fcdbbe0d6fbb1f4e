"""Column cache across passes: each chunk's columns read once, kept in memory or on disk.

The first pass of an :class:`analysis.driver.runner.Evaluator` reads every chunk from ROOT
(coffea, NanoEvents) and its processor hands back, next to its states, the chunk's
:class:`~analysis.pipeline.layout.ChunkColumns` in a :class:`ColumnBatch` under the output key
:data:`COLUMNS_KEY`. The driver stores them in a :class:`ColumnCache`; a later pass
whose chunks are all cached evaluates them in the driver's process, without coffea,
uproot or NanoEvents (see :mod:`analysis.driver.runner`).

Key (:func:`chunk_key`): the file's UUID (uproot's ``file.uuid``, the ROOT ``fUUID``),
the tree, the entry range, the branches the plan reads, the weight branch and the
non-finite policy (the cached columns are those left after ``nonfinite: drop``). The
path is not in the key; a file rewritten at the same path has a new UUID, so its old
entries are never used (a new :class:`Evaluator` opens every file and sees the new
UUID; one evaluator checks each file once, when it starts).

Memory: columns are kept in memory up to ``budget`` bytes; beyond that each further
chunk is written to a ``.npz`` file (numpy's own format, read back with
``allow_pickle=False``) in a private temporary directory, removed by :meth:`close`.

Where the columns go (:func:`keep_columns`, called by the processor after a chunk):

- in the driver's own process (the iterative executor) straight into the driver's
  cache (:func:`local_cache`), so that the budget bounds the memory during the first
  pass too;
- in a dask worker (when the driver asks for it with ``worker_budget``) into a cache
  of that worker process (:func:`worker_cache`, same budget and spilling, per worker);
  only the chunk's place, the worker's address, travels back (a :class:`ColumnPlaces`
  under :data:`PLACES_KEY`) and the driver records it (:meth:`ColumnCache.place`).
  Later passes run each such chunk on its worker (:func:`evaluate_on_worker`), so no
  column goes through the scheduler or the driver;
- elsewhere (a futures process pool) back with the chunk's output, in a
  :class:`ColumnBatch` under :data:`COLUMNS_KEY`; the driver stores them after the pass
  (the first pass then holds all of them at once in the driver).

Only chunks that were read and evaluated without error reach the cache: a failing
chunk's output is just its fault record (:func:`analysis.data.faults.guarded`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import uuid as uuidlib
import weakref
from typing import Any

import numpy as np

from analysis.data.atomic import atomic_open
from analysis.pipeline.layout import ChunkColumns

__all__ = [
    "COLUMNS_KEY",
    "DEFAULT_BUDGET",
    "PLACES_KEY",
    "ColumnBatch",
    "ColumnCache",
    "ColumnPlaces",
    "adopt_columns",
    "chunk_key",
    "columns_nbytes",
    "drop_worker_cache",
    "evaluate_on_worker",
    "keep_columns",
    "local_cache",
    "plan_branches",
    "take_columns",
    "uuid_text",
    "worker_address",
    "worker_cache",
]

#: Output key of the columns a first pass hands back (not a string: never a dataset name).
COLUMNS_KEY = ("diffcoffea", "columns")

#: Output key of the places (dask worker addresses) of the columns kept on workers.
PLACES_KEY = ("diffcoffea", "places")

#: Default in-memory budget in bytes (``cache_memory_mb`` in the config).
DEFAULT_BUDGET = 1024 * 2**20


def uuid_text(raw: Any) -> str:
    """A file UUID as text: ``bytes`` (uproot's ``fUUID``, coffea's ``WorkItem``) or ``str``."""
    if isinstance(raw, (bytes, bytearray)):
        return str(uuidlib.UUID(bytes=bytes(raw))) if len(raw) == 16 else bytes(raw).hex()
    return str(raw)


def plan_branches(plan: Any) -> str:
    """What ``plan`` reads, as text: the per-event branches and each collection's fields
    (a config that needs another branch never meets a cache entry without it)."""
    return repr([("event_keys", plan.event_keys), ("sets.fields", plan.sets.fields)])


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
    return (
        uuid_text(fileuuid),
        treename,
        int(start),
        int(stop),
        branches,
        weight_branch,
        nonfinite,
    )


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
    with atomic_open(path, what="cache spill file") as f:  # a full disk: one line
        np.savez(f, __manifest__=np.array(json.dumps(manifest)), **arrays)


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


class ColumnPlaces:
    """Where chunks' columns are kept, ``{key: dask worker address}``, addable (``a + b``
    merges; a chunk run twice, e.g. after a worker died, keeps its later place)."""

    def __init__(self, places: dict[tuple, str] | None = None) -> None:
        self.places = dict(places or {})

    def __add__(self, other: ColumnPlaces) -> ColumnPlaces:
        if not isinstance(other, ColumnPlaces):
            return NotImplemented
        return ColumnPlaces({**self.places, **other.places})

    def __len__(self) -> int:
        return len(self.places)


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
    Chunks kept by dask workers are recorded by :meth:`place` (``key in cache`` and
    ``len(cache)`` count them; :meth:`get` does not hand them out, :meth:`where` says
    which worker has them).
    """

    def __init__(self, *, budget: int = DEFAULT_BUDGET, spill_dir: str | None = None) -> None:
        self.budget = int(budget)
        self._memory: dict[tuple, ChunkColumns] = {}
        self._disk: dict[tuple, str] = {}
        #: chunks kept by dask workers: ``{key: worker address}``
        self.remote: dict[tuple, str] = {}
        self.memory_bytes = 0
        self._spill_root = spill_dir
        self._spill_dir: str | None = None
        self.reads = 0
        self.pid = os.getpid()
        #: names this cache to processors running in this process (see :func:`local_cache`)
        self.token = uuidlib.uuid4().hex
        _LOCAL[self.token] = self

    def __contains__(self, key: tuple) -> bool:
        return self.holds(key) or key in self.remote

    def __len__(self) -> int:
        return len(self._memory) + len(self._disk) + len(self.remote)

    def holds(self, key: tuple) -> bool:
        """Whether this process has the columns of ``key`` (in memory or spilled)."""
        return key in self._memory or key in self._disk

    def where(self, key: tuple) -> str | None:
        """The address of the dask worker that keeps ``key``'s columns (``None``: not kept
        by a worker)."""
        return self.remote.get(key)

    def place(self, key: tuple, address: str) -> None:
        """Record that the worker at ``address`` keeps the columns of ``key``."""
        self.remote[key] = address

    def forget(self, key: tuple) -> None:
        """Forget a worker's chunk (its worker died: the chunk is read again)."""
        self.remote.pop(key, None)

    @property
    def spilled(self) -> int:
        """Number of chunks kept on disk."""
        return len(self._disk)

    def put(self, key: tuple, cols: ChunkColumns) -> None:
        """Keep ``cols`` under ``key`` (in memory if it fits the budget, else on disk)."""
        if self.holds(key):
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
        path = os.path.join(self._spill_dir, f"chunk{uuidlib.uuid4().hex}.npz")
        _save(path, cols)
        self._disk[key] = path

    def get(self, key: tuple) -> ChunkColumns:
        """The columns under ``key`` (``KeyError`` if absent)."""
        if key in self._memory:
            return self._memory[key]
        path = self._disk[key]
        self.reads += 1
        return _load(path)

    def discard(self, key: tuple) -> None:
        """Drop the columns of ``key`` kept here (memory or disk), if any."""
        cols = self._memory.pop(key, None)
        if cols is not None:
            self.memory_bytes -= columns_nbytes(cols)
        path = self._disk.pop(key, None)
        if path is not None:
            with contextlib.suppress(OSError):
                os.remove(path)

    def close(self) -> None:
        """Forget every entry and remove the spill directory."""
        self._memory.clear()
        self._disk.clear()
        self.remote.clear()
        self.memory_bytes = 0
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None


# --- dask workers: each keeps the chunks it read -------------------------------------

# The caches a worker process keeps for drivers, by the driver cache's token (strong
# references: nothing else in the worker holds them between tasks).
_HELD: dict[str, ColumnCache] = {}


def worker_address() -> str | None:
    """The address of the dask worker running this task; ``None`` outside a dask worker."""
    try:
        from distributed import get_worker
    except ImportError:  # the dask extra is not installed: no dask worker either
        return None
    try:
        return get_worker().address
    except ValueError:  # not in a worker's task
        return None


def worker_cache(token: str, *, budget: int | None = None) -> ColumnCache | None:
    """This worker process's cache for the driver cache ``token``; made (with ``budget``)
    if absent and a budget is given, else ``None``. A forked copy is never used."""
    cache = _HELD.get(token)
    if cache is not None and cache.pid != os.getpid():
        cache = None
    if cache is None and budget is not None:
        cache = _HELD[token] = ColumnCache(budget=budget)
    return cache


def drop_worker_cache(token: str) -> int:
    """Close this process's cache for ``token`` (its spill files go); the chunks it held.

    Run on every worker by the driver when it closes (``client.run``)."""
    cache = _HELD.pop(token, None)
    if cache is None:
        return 0
    n = len(cache)
    cache.close()
    return n


def keep_columns(
    key: tuple, cols: ChunkColumns, *, token: str | None, worker_budget: int | None = None
) -> dict:
    """Keep one chunk's columns for the driver's cache ``token``; what to add to the
    chunk's output (see the module docstring): nothing in the driver's process,
    ``{PLACES_KEY: ColumnPlaces}`` in a dask worker when ``worker_budget`` is given,
    else ``{COLUMNS_KEY: ColumnBatch}`` (the columns themselves)."""
    sink = local_cache(token)
    if sink is not None:
        sink.put(key, cols)
        return {}
    address = worker_address() if worker_budget is not None and token else None
    if address is not None:
        worker_cache(token, budget=worker_budget).put(key, cols)
        return {PLACES_KEY: ColumnPlaces({key: address})}
    return {COLUMNS_KEY: ColumnBatch({key: cols})}


def evaluate_on_worker(proc: Any, token: str, key: tuple, dataset: str) -> dict | None:
    """``proc.evaluate(dataset, columns)`` for a chunk this worker keeps (a dask task of
    the driver's later passes); ``None`` if the worker does not have it (a new process
    at the same address, or a dropped cache): the driver then reads the chunk again."""
    cache = worker_cache(token)
    if cache is None or not cache.holds(key):
        return None
    return proc.evaluate(dataset, cache.get(key))


def take_columns(token: str, key: tuple) -> ChunkColumns | None:
    """The columns of ``key`` this worker keeps, removed from its cache (the first half
    of a move to another worker; ``None`` if it does not have them)."""
    cache = worker_cache(token)
    if cache is None or not cache.holds(key):
        return None
    cols = cache.get(key)
    cache.discard(key)
    return cols


def adopt_columns(token: str, key: tuple, cols: ChunkColumns | None, *, budget: int) -> bool | None:
    """Keep ``cols`` under ``key`` in this worker's cache (the second half of a move);
    ``None`` if there was nothing to move (the driver then reads the chunk again)."""
    if cols is None:
        return None
    worker_cache(token, budget=budget).put(key, cols)
    return True
