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

Where the columns live (the driver's process, a dask worker's, a futures worker's) is
:mod:`analysis.data.placement`: one store per process and token, reached and dropped one
way, for the YAML engine and own processors alike. Only chunks that were read and
evaluated without error reach the cache: a failing chunk's output is just its fault
record (:func:`analysis.data.faults.guarded`).

Own processors (:mod:`analysis.data.owncache`) keep their columns under the same
:func:`chunk_key` (with the dataset and its metadata, which their ``columns`` may read)
in a :class:`ColumnCache` that drops the least recently used chunk beyond its budget
(``evict="drop"``) instead of spilling.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import uuid as uuidlib
from typing import Any

from analysis.data.spill import _load, _own, _save, columns_nbytes
from analysis.pipeline.layout import ChunkColumns

__all__ = [
    "COLUMNS_KEY",
    "DEFAULT_BUDGET",
    "PLACES_KEY",
    "ColumnBatch",
    "ColumnCache",
    "ColumnPlaces",
    "chunk_key",
    "columns_nbytes",
    "plan_branches",
    "uuid_text",
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
    branches: Any,
    weight_branch: str | None,
    nonfinite: str | None,
    metadata: Any = None,
) -> tuple:
    """The one key of a chunk's kept columns, for the YAML engine and own processors.

    The file (its UUID, never its path) and tree, the entry range, the columns read
    (``branches``: a hashable description of what is read; ``weight_branch``; the
    ``nonfinite`` policy that decides which values are left), and ``metadata``: a
    hashable description of what else the columns depend on. The YAML engine's columns
    depend on nothing else (``None``: two datasets on one file share them); an own
    processor's ``columns(events)`` may read the dataset and the fileset's metadata, so
    :mod:`analysis.data.owncache` describes them here.

    Parameters
    ----------
    fileuuid : bytes or str
        The file's UUID (uproot's ``fUUID``, coffea's ``WorkItem.fileuuid``) or its text.
    treename : str
        The tree.
    start, stop : int
        The entry range.
    branches : hashable
        What the columns are made of (:func:`plan_branches`; an own processor's class
        and :meth:`~analysis.data.owncache.CachedColumns.column_key`).
    weight_branch : str or None
        Keyword-only. The weight branch read with them.
    nonfinite : str or None
        Keyword-only. The non-finite policy applied to them.
    metadata : hashable, optional
        Keyword-only. What else the columns depend on (default: nothing).

    Returns
    -------
    tuple
        The key (hashable, equal for equal arguments in any process).
    """
    return (
        uuid_text(fileuuid),
        treename,
        int(start),
        int(stop),
        branches,
        weight_branch,
        nonfinite,
        metadata,
    )


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


class ColumnCache:
    """Chunk columns by :func:`chunk_key`: in memory up to ``budget`` bytes, then on disk
    (``evict="spill"``) or the least recently used dropped (``evict="drop"``).

    The one store of kept columns: the YAML engine's :class:`ChunkColumns` (spilled to
    ``.npz`` files beyond the budget) and an own processor's columns
    (:mod:`analysis.data.owncache`: any pytree, put with its ``nbytes``, the least
    recently used dropped beyond the budget and read again when met).
    ``spill_dir``: where the ``.npz`` files go (default: a new temporary directory).
    ``reads`` counts the columns handed out from disk, for tests and benchmarks.
    Chunks kept by dask workers are recorded by :meth:`place` (``key in cache`` and
    ``len(cache)`` count them; :meth:`get` does not hand them out, :meth:`where` says
    which worker has them).
    """

    def __init__(self, *, budget: int = DEFAULT_BUDGET, spill_dir: str | None = None,
                 evict: str = "spill") -> None:
        if evict not in ("spill", "drop"):
            raise ValueError(f"evict: expected 'spill' or 'drop', found {evict!r}")
        self.budget = int(budget)
        self.evict = evict
        self._memory: dict[tuple, Any] = {}
        self._sizes: dict[tuple, int] = {}
        self._disk: dict[tuple, str] = {}
        #: chunks kept by dask workers: ``{key: worker address}``
        self.remote: dict[tuple, str] = {}
        self.memory_bytes = 0
        self._spill_root = spill_dir
        self._spill_dir: str | None = None
        self.reads = 0
        #: lookups that found their chunk here or not (kept by whoever looks: owncache)
        self.hits = self.misses = 0
        #: the process that made it (a forked copy is never used: analysis.data.placement)
        self.pid = os.getpid()
        #: names this cache to chunks running in its process and to dask workers'
        #: stores of the same chunks (:mod:`analysis.data.placement`)
        self.token = uuidlib.uuid4().hex

    def __contains__(self, key: tuple) -> bool:
        return self.holds(key) or key in self.remote

    def __len__(self) -> int:
        return len(self._memory) + len(self._disk) + len(self.remote)

    def keys(self) -> list[tuple]:
        """The keys kept in this process: in memory (least recently used first with
        ``evict="drop"``), then on disk."""
        return [*self._memory, *self._disk]

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

    def put(self, key: tuple, cols: Any, *, nbytes: int | None = None) -> bool:
        """Keep ``cols`` under ``key``: in memory if it fits the budget, else on disk
        (``evict="spill"``) or in place of the least recently used (``evict="drop"``).

        Parameters
        ----------
        key : tuple
            The chunk's :func:`chunk_key`.
        cols : ChunkColumns or any pytree
            The columns: a :class:`ChunkColumns` (its arrays copied, so that no view keeps
            a chunk's buffers alive), or, with ``nbytes``, any value kept as it is.
        nbytes : int, optional
            Keyword-only. The bytes ``cols`` holds (default: its arrays' bytes); a value
            given with it is never spilled.

        Returns
        -------
        bool
            Whether ``cols`` is kept (``evict="drop"``: not where it alone exceeds the
            budget).
        """
        if self.holds(key):
            return True
        if nbytes is None:
            cols = dataclasses.replace(
                cols, **{f.name: _own(getattr(cols, f.name)) for f in dataclasses.fields(cols)}
            )
        n = columns_nbytes(cols) if nbytes is None else int(nbytes)
        if self.evict == "drop":
            if n > self.budget:
                return False
            while self._memory and self.memory_bytes + n > self.budget:
                self.discard(next(iter(self._memory)))  # the least recently used
        if self.memory_bytes + n <= self.budget:
            self._memory[key] = cols
            self._sizes[key] = n
            self.memory_bytes += n
            return True
        if nbytes is not None:
            raise TypeError("ColumnCache.put: only ChunkColumns spill to disk; "
                            "a value put with nbytes needs evict='drop'")
        if self._spill_dir is None:
            if self._spill_root is not None:
                os.makedirs(self._spill_root, exist_ok=True)
            self._spill_dir = tempfile.mkdtemp(prefix="diffcoffea-cache-", dir=self._spill_root)
        path = os.path.join(self._spill_dir, f"chunk{uuidlib.uuid4().hex}.npz")
        _save(path, cols)
        self._disk[key] = path
        return True

    def get(self, key: tuple, *, touch: bool = True) -> Any:
        """The columns under ``key`` (``KeyError`` if absent); with ``evict="drop"`` and
        ``touch`` they become the most recently used."""
        if key in self._memory:
            if touch and self.evict == "drop":
                self._memory[key] = self._memory.pop(key)
            return self._memory[key]
        path = self._disk[key]
        self.reads += 1
        return _load(path)

    def recount(self, key: tuple) -> None:
        """Count again what the columns of ``key`` hold after a pass: their arrays and
        what a pass kept with them (:meth:`ChunkColumns.memo_nbytes`: object offsets, a
        validation part's weights and events). Where that no longer fits the budget the
        kept part subsets are let go first (a pass then makes its part again: ~5 ms of
        CPU per 100k events), so the cache stays within ``budget``; no other chunk is
        evicted for them. Columns on disk (read afresh each pass) and values put with
        ``nbytes`` are left as they are."""
        cols = self._memory.get(key)
        if not isinstance(cols, ChunkColumns) or key not in self._sizes:
            return
        n = columns_nbytes(cols) + cols.memo_nbytes()
        if self.memory_bytes - self._sizes[key] + n > self.budget:
            cols.forget_subsets()
            n = columns_nbytes(cols) + cols.memo_nbytes()
        self.memory_bytes += n - self._sizes[key]
        self._sizes[key] = n

    def discard(self, key: tuple) -> None:
        """Drop the columns of ``key`` kept here (memory or disk), if any."""
        if self._memory.pop(key, None) is not None:
            self.memory_bytes -= self._sizes.pop(key)
        path = self._disk.pop(key, None)
        if path is not None:
            with contextlib.suppress(OSError):
                os.remove(path)

    def close(self) -> None:
        """Forget every entry and remove the spill directory."""
        self._memory.clear()
        self._sizes.clear()
        self._disk.clear()
        self.remote.clear()
        self.memory_bytes = 0
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None
