"""Columns read once across gradient passes, for your own coffea processors.

A gradient loop runs the same chunks through ``processor.Runner`` once per step. The
YAML path keeps each chunk's columns between passes (:mod:`analysis.data.cache`); an
own processor gets the same with the :class:`CachedColumns` mix-in: split ``process``
into ``columns(events)`` (read and prepare the chunk's inputs: ``stats.from_awkward``
of the branches, numpy arrays; anything that does not depend on the parameters) and
``process_columns(columns, metadata)`` (the part that depends on ``self.theta``: the
``stats.derive`` call). ``columns`` runs once per chunk and process; later passes over
the same chunk take the kept columns, and coffea's virtual NanoEvents then read no
branch at all.

Key: the one chunk key of the YAML engine's cache (:func:`analysis.data.cache.chunk_key`),
in its one store (a :class:`~analysis.data.cache.ColumnCache` per process): the
processor's class, its :meth:`CachedColumns.column_key` (constructor options
that change the columns), the file's UUID (coffea's ``metadata["fileuuid"]``), the tree,
the entry range, and the rest of the chunk's metadata: the dataset and the fileset's
own metadata of it, which ``columns`` may read (a data and an MC dataset on one file
have columns of their own; metadata that has no hashable description keeps nothing). A file rewritten at the same path has a new UUID: its old entries
are never used. Chunks without a UUID (not from a Runner) are not kept.

Where the columns live: in the process that ran the chunk, up to ``column_budget``
bytes (default :data:`analysis.data.cache.DEFAULT_BUDGET`, the YAML path's in-memory
budget; a ``Jagged`` counts with the padded copy of its values and their segment ids
that a compiled ``stats.derive`` keeps with it, so that a later pass does not pad
again); beyond it the least recently used chunks are dropped (read again when met).
So it works where the processes outlive a pass: the iterative executor (the driver's
process), dask (the cluster's workers, while the client lives) and futures with a pool
kept across passes (``processor.FuturesExecutor(pool=ProcessPoolExecutor(2))``; a
``FuturesExecutor(workers=2)`` starts new processes per Runner call, which read again).
With several workers a chunk is reused only where it lands on a worker that kept it;
each worker keeps up to its own budget.

A kept chunk also records its file's size and modification time: a file rewritten in
place is read again, even where coffea's Runner still holds the old file's UUID in its
metadata cache (which it keeps for the session). Files that cannot be stat'ed (remote
URLs) are trusted by their UUID alone.

:class:`CachedRunner` wraps a Runner: when every chunk of the fileset is kept (in this
process with the iterative executor; in the cluster's workers with coffea's
``DaskExecutor``) it calls the processor on the kept columns directly, without coffea's
per-chunk work (opening the file, building the chunk's NanoEvents), which is what a
later pass with the column cache otherwise spends most of its time on.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np

from analysis.data.cache import DEFAULT_BUDGET, ColumnCache, chunk_key
from analysis.stats._closure import padded_nbytes
from analysis.stats.jagged import Jagged

__all__ = ["CachedColumns", "CachedRunner", "cache_info", "clear_cache"]

# This process's kept columns, in the one column store (analysis.data.cache.ColumnCache,
# least recently used dropped beyond the budget): key -> (columns, the file's stamp). Its
# budget is the processor's column_budget, set before each put.
_KEPT = ColumnCache(budget=DEFAULT_BUDGET, evict="drop")
_STATS = {"hits": 0, "misses": 0}


def _file_stamp(filename: Any) -> tuple[int, int] | None:
    """``(size, mtime_ns)`` of a local file; None where it cannot be stat'ed (a URL)."""
    try:
        st = os.stat(filename)
    except (OSError, TypeError, ValueError):
        return None
    return (st.st_size, st.st_mtime_ns)


# coffea's per-chunk metadata that names where the chunk is read, not what it is (the
# file by its UUID is in the key; the same file under another path has the same columns),
# and "version", the NanoEvents schema version that coffea's factory adds to
# events.metadata (a Runner's WorkItem, which CachedRunner reads, does not have it)
_LOCATION = ("filename", "fileuuid", "treename", "entrystart", "entrystop", "version")


def _frozen(value: Any) -> Any:
    """A hashable, order-independent description of a metadata value, or ``None`` where
    it has none (the chunk is then not kept)."""
    if isinstance(value, Mapping):
        items = [(str(k), _frozen(v)) for k, v in value.items()]
        return None if any(v is None for _, v in items) else ("map", tuple(sorted(items)))
    if isinstance(value, (list, tuple)):
        items = [_frozen(v) for v in value]
        return None if any(v is None for v in items) else ("seq", tuple(items))
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return ("value", type(value).__name__, value)
    return None


def _chunk_key(proc: CachedColumns, metadata: Mapping) -> tuple | None:
    """The kept columns' key of a chunk (None: not kept: no UUID, budget 0, or metadata
    without a hashable description). Every piece of metadata that :meth:`columns` may
    read is in it: the dataset and the fileset's own metadata (two datasets on one file,
    data without ``genWeight`` and MC with it, have columns of their own)."""
    uuid_ = metadata.get("fileuuid")
    if not uuid_ or int(proc.column_budget) <= 0:  # budget 0: neither kept nor looked up
        return None
    described = _frozen({k: v for k, v in metadata.items() if k not in _LOCATION})
    if described is None:
        return None
    if metadata.get("entrystart") is None or metadata.get("entrystop") is None:
        return None
    # the one chunk key of analysis.data.cache: what is read is the processor's class and
    # its column_key; what else the columns depend on, the dataset and its metadata
    return chunk_key(
        uuid_, metadata.get("treename"), metadata["entrystart"], metadata["entrystop"],
        branches=(type(proc).__module__, type(proc).__qualname__, proc.column_key()),
        weight_branch=None, nonfinite=None, metadata=described,
    )


def _entry(key: tuple | None, *, touch: bool = True) -> tuple[Any, Any] | None:
    """``(columns, stamp)`` kept under ``key`` in this process, or None."""
    if key is None or not _KEPT.holds(key):
        return None
    return _KEPT.get(key, touch=touch)


def _drop(key: tuple) -> None:
    _KEPT.discard(key)


def _lookup(key: tuple | None, stamp: Any) -> Any:
    """The kept columns of ``key`` if their file is unchanged (else the entry is dropped)."""
    kept = _entry(key)
    if kept is None:
        return None
    if kept[1] != stamp:  # the file was rewritten since its columns were read
        _drop(key)
        return None
    return kept[0]


def _nbytes(columns: Any) -> int:
    total = 0
    for leaf in jax.tree_util.tree_leaves(columns, is_leaf=lambda x: isinstance(x, Jagged)):
        if isinstance(leaf, Jagged):
            # with the padded copy that stats.derive keeps with it (Jagged.kept)
            total += _nbytes([leaf.values, leaf.offsets]) + padded_nbytes(leaf)
            continue
        nbytes = getattr(leaf, "nbytes", None)
        total += int(nbytes) if nbytes is not None else np.asarray(leaf).nbytes
    return total


def cache_info() -> dict[str, int]:
    """This process's ``{"hits", "misses", "bytes", "chunks"}`` of :class:`CachedColumns`."""
    return {**_STATS, "bytes": _KEPT.memory_bytes, "chunks": len(_KEPT)}


def clear_cache() -> None:
    """Drop this process's kept columns (and reset :func:`cache_info`)."""
    _KEPT.close()
    _STATS.update(hits=0, misses=0)


class CachedColumns:
    """Mix-in for a coffea processor whose chunk inputs are read once per chunk.

    Subclasses define :meth:`columns` and :meth:`process_columns` and inherit
    ``process``. ``column_budget`` (bytes, an attribute; set it in ``__init__``) bounds
    this process's kept columns; 0 keeps none and reads every chunk.
    """

    column_budget: int = DEFAULT_BUDGET

    def columns(self, events: Any) -> Any:
        """The chunk's inputs, independent of the parameters: a pytree of arrays (numpy,
        JAX, :class:`analysis.stats.Jagged`). Called once per chunk and process."""
        raise NotImplementedError

    def process_columns(self, columns: Any, metadata: dict) -> Any:
        """The chunk's output from its :meth:`columns` (``metadata``: coffea's
        ``events.metadata``, e.g. ``metadata["dataset"]``)."""
        raise NotImplementedError

    def column_key(self) -> Any:
        """Hashable options of this processor that change :meth:`columns` (default: none)."""
        return ()

    def process(self, events: Any) -> Any:
        metadata = dict(events.metadata)
        key = _chunk_key(self, metadata)
        stamp = _file_stamp(metadata.get("filename")) if key is not None else None
        kept = _lookup(key, stamp)
        if kept is not None:
            _STATS["hits"] += 1
            return self.process_columns(kept, metadata)
        _STATS["misses"] += 1
        columns = self.columns(events)
        if key is not None:
            _KEPT.budget = int(self.column_budget)
            _KEPT.put(key, (columns, stamp), nbytes=_nbytes(columns))
        return self.process_columns(columns, metadata)


def _chunk_metadata(item: Any) -> dict:
    """``events.metadata`` of a coffea WorkItem, as coffea's Runner builds it."""
    metadata = {
        "dataset": item.dataset,
        "filename": item.filename,
        "treename": item.treename,
        "entrystart": item.entrystart,
        "entrystop": item.entrystop,
        "fileuuid": str(uuid.UUID(bytes=item.fileuuid)) if len(item.fileuuid) > 0 else "",
    }
    if item.usermeta is not None:
        metadata.update(item.usermeta)
    return metadata


class CachedRunner:
    """A coffea ``processor.Runner`` that serves later passes from the kept columns.

    ``CachedRunner(runner)(fileset, processor_instance, treename=...)`` returns what
    ``runner(...)`` returns. When ``processor_instance`` is a :class:`CachedColumns`
    processor and every chunk that the Runner would make of the fileset is kept (their
    files unchanged: same size and modification time as when their columns were read),
    it calls ``processor_instance.process_columns`` on the kept chunks in the Runner's
    chunk order, merges the outputs with ``coffea.processor.accumulate`` (the iterative
    executor's merge, so the result is the iterative Runner's bit for bit) and applies
    ``postprocess``. Otherwise the wrapped Runner runs (and reads the chunks that are
    not kept). :attr:`last` says which path ran, :attr:`why` why.

    The chunks come from ``runner.preprocess`` (coffea's metadata cache: no file is
    opened once the Runner has seen it). Where a file changed, its entries in that
    metadata cache are dropped before the Runner runs, so the Runner chunks the new file
    by its own UUID and number of entries. Kept columns live in the process that read
    them. With the iterative executor that is this one. With coffea's ``DaskExecutor``
    (given a ``client``) they are in the cluster's workers: in one ``client.run`` each
    worker calls ``process_columns`` on the chunks it keeps with unchanged files and
    says which it keeps with changed ones; where every chunk was served, the outputs
    (a chunk kept by two workers taken from the first by address) merge here in the Runner's
    chunk order (so the result equals the Runner's within its floating-point rounding:
    dask's Runner merges in another order). Pin each chunk to a worker in the passes
    that keep columns (``DaskExecutor(worker_affinity=True)``), else a chunk may be
    kept nowhere and the Runner runs. Any other executor (``FuturesExecutor``: a process
    pool cannot send a task to the process that keeps a chunk) runs the Runner on every
    call (which reuses the workers' kept columns where a chunk lands on its worker).

    Parameters
    ----------
    runner : coffea.processor.Runner
        The Runner to wrap; its ``chunksize``, ``maxchunks`` and metadata cache decide
        the chunks. With an executor other than ``IterativeExecutor`` or a
        ``DaskExecutor`` with a ``client``, ``savemetrics``, ``use_result_type``, a
        ``checkpointer``, dataframes or parquet input every call runs the Runner.

    Attributes
    ----------
    last : str or None
        ``"cached"`` (the kept columns), ``"runner"`` (the wrapped Runner) or None (not
        called yet).
    why : str
        One line saying why the last call took its path.
    """

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.last: str | None = None
        self.why = ""

    def _unsupported(self, processor_instance: Any) -> str | None:
        if not isinstance(processor_instance, CachedColumns):
            return f"{type(processor_instance).__name__} is not a CachedColumns processor"
        if int(processor_instance.column_budget) <= 0:
            return "column_budget is 0 (nothing kept)"
        r = self.runner
        from coffea.processor import DaskExecutor, IterativeExecutor

        if isinstance(r.executor, DaskExecutor):
            if getattr(r.executor, "client", None) is None:
                return "the Runner's DaskExecutor has no client"
            if getattr(r.executor, "use_dataframes", False):
                return "the Runner's DaskExecutor returns dataframes"
        elif not isinstance(r.executor, IterativeExecutor):
            # its chunks' columns are kept in the workers, and a task cannot be sent
            # to the worker that keeps a chunk
            return f"the Runner's {type(r.executor).__name__} keeps columns in its workers"
        for name in ("savemetrics", "use_result_type", "checkpointer", "use_dataframes"):
            if getattr(r, name, None):
                return f"the Runner's {name} is set"
        if getattr(r, "format", "root") != "root":
            return f"the Runner reads {r.format} files"
        return None

    def _kept(self, processor_instance: CachedColumns, items: Iterable) -> tuple[list, str | None]:
        """``([(columns, metadata), ...], None)``, or ``([], why)`` where a chunk is not
        kept (or its file changed: then coffea's metadata of that file is dropped)."""
        found: list = []
        stamps: dict[Any, Any] = {}
        missing = changed = 0
        for item in items:
            metadata = _chunk_metadata(item)
            key = _chunk_key(processor_instance, metadata)
            if item.filename not in stamps:
                stamps[item.filename] = _file_stamp(item.filename)
            kept = _entry(key, touch=False)
            if kept is not None and kept[1] != stamps[item.filename]:
                changed += 1
                self._forget_file(item.filename)
            elif kept is None:
                missing += 1
            else:
                found.append((kept[0], metadata, key))
        if changed:
            return [], f"{changed} chunks of changed files"
        if missing or not found:
            return [], f"{missing} of {missing + len(found)} chunks not kept in this process"
        return found, None

    def _forget_file(self, filename: str) -> None:
        """Drop coffea's metadata (UUID, number of entries) of a changed file, so that the
        Runner reads it again; its stale kept columns drop when looked up (their stamp)."""
        cache = getattr(self.runner, "metadata_cache", None)
        if cache is not None:
            for filemeta in [k for k in cache if getattr(k, "filename", None) == filename]:
                del cache[filemeta]

    def __call__(self, fileset: Any, processor_instance: Any, *, treename: str | None = None,
                 **kwargs: Any) -> Any:
        """``runner(fileset, processor_instance, treename=treename, **kwargs)``, from the
        kept columns where every chunk is kept (class docstring).

        Parameters
        ----------
        fileset : dict
            coffea's fileset, ``{dataset: [file, ...]}`` (or its other forms).
        processor_instance : coffea.processor.ProcessorABC
            The processor; a :class:`CachedColumns` one for the kept path.
        treename : str or None, optional
            Keyword-only. The tree, as for the Runner.
        **kwargs
            Keyword-only. The Runner's other options (``uproot_options``, ...).

        Returns
        -------
        Any
            The Runner's output (after ``postprocess``).
        """
        why = self._unsupported(processor_instance)
        found: list = []
        client = getattr(self.runner.executor, "client", None)
        if why is None:
            options = {k: v for k, v in kwargs.items() if k == "uproot_options"}
            items = list(self.runner.preprocess(fileset, treename=treename, **options))
            if client is None:
                found, why = self._kept(processor_instance, items)
            else:
                found, why = self._dask_outputs(client, processor_instance, items)
        if why is not None:
            self.last, self.why = "runner", why
            return self.runner(fileset, processor_instance, treename=treename, **kwargs)
        from coffea.processor import accumulate

        def outputs():
            for columns, metadata, key in found:
                _KEPT.get(key)  # the most recently used
                _STATS["hits"] += 1
                yield processor_instance.process_columns(columns, metadata)

        if client is None:
            out = accumulate(outputs())
            self.why = f"{len(found)} chunks from the kept columns"
        else:
            out = accumulate(found)  # the workers' outputs, in chunk order
        post = processor_instance.postprocess(out)
        self.last = "cached"
        return out if post is None else post

    def _dask_outputs(self, client: Any, processor_instance: CachedColumns,
                      items: list) -> tuple[list, str | None]:
        """``([output, ...] in chunk order, None)`` from the dask workers' kept columns,
        or ``([], why)`` where a chunk is kept with its file unchanged on no worker;
        sets :attr:`why` when it succeeds."""
        chunks = [_chunk_metadata(item) for item in items]
        if not chunks or any(_chunk_key(processor_instance, m) is None for m in chunks):
            return [], f"{len(chunks)} chunks, not all with a file UUID"
        # One round trip: every worker computes the chunks it keeps with their files
        # unchanged and says which it keeps with a changed file (a question first and
        # pinned tasks after cost a second one: 0.30x -> 0.25x a plain pass at 4 chunks
        # of 50k). The keys are made in the workers, from the processor as they unpickle
        # it (a class defined in a function comes back under another __qualname__).
        answers = client.run(_serve_kept, processor_instance, chunks)
        # each chunk from the first worker (by address) that kept it with its file
        # unchanged (a chunk kept by two workers, read there in passes without
        # worker_affinity, was computed by both)
        outputs: dict[int, Any] = {}
        changed: set[str] = set()
        served = set()
        for address in sorted(answers):
            done, stale = answers[address]
            for index, output in done:
                if index not in outputs:
                    outputs[index] = output
                    served.add(address)
            changed.update(chunks[index]["filename"] for index in stale)
        if len(outputs) < len(chunks):
            for filename in changed:
                self._forget_file(filename)
            missing = len(chunks) - len(outputs)
            return [], (f"{missing} of {len(chunks)} chunks not kept on the dask workers"
                        + (f" ({len(changed)} files changed)" if changed else ""))
        self.why = (f"{len(chunks)} chunks from the kept columns of {len(served)} dask "
                    f"workers")
        return [outputs[index] for index in range(len(chunks))], None


def _kept_here(processor_instance: CachedColumns,
               chunks: list[dict]) -> tuple[list[int], list[int]]:
    """In a dask worker: the indices of the chunks (their metadata) kept in this
    process with their file unchanged, and of those kept with a changed file."""
    kept: list[int] = []
    stale: list[int] = []
    stamps: dict[Any, Any] = {}
    for index, metadata in enumerate(chunks):
        key = _chunk_key(processor_instance, metadata)
        filename = metadata["filename"]
        entry = _entry(key, touch=False)
        if entry is None:
            continue
        if filename not in stamps:
            stamps[filename] = _file_stamp(filename)
        (kept if entry[1] == stamps[filename] else stale).append(index)
    return kept, stale


def _serve_kept(processor_instance: CachedColumns,
                chunks: list[dict]) -> tuple[list[tuple[int, Any]], list[int]]:
    """In a dask worker (``client.run``): ``[(index, process_columns(kept, metadata)),
    ...]`` for the chunks (their metadata, in order) kept in this process with their file
    unchanged, and the indices of those kept with a changed file (not computed)."""
    kept, stale = _kept_here(processor_instance, chunks)
    out = []
    for index in kept:
        metadata = chunks[index]
        key = _chunk_key(processor_instance, metadata)
        _STATS["hits"] += 1
        out.append((index, processor_instance.process_columns(_KEPT.get(key)[0], metadata)))
    return out, stale
