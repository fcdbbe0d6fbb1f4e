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
in its one store (a :class:`~analysis.data.cache.ColumnCache`), placed as the YAML engine's
(:mod:`analysis.data.placement`): the
processor's class, its :meth:`CachedColumns.column_key` (constructor options
that change the columns), the file's UUID (coffea's ``metadata["fileuuid"]``), the tree,
the entry range, and the rest of the chunk's metadata: the dataset and the fileset's
own metadata of it, which ``columns`` may read (a data and an MC dataset on one file
have columns of their own; metadata that has no hashable description keeps nothing). A file rewritten at the same path has a new UUID: its old entries
are never used. Chunks without a UUID (not from a Runner) are not kept.

Where the columns live: in the process that ran the chunk, in its store of the
processor's ``column_store`` token (:data:`OWN_STORE` unless the processor names another;
the registry of :mod:`analysis.data.placement`, dropped by :func:`clear_cache`), up to
``column_budget``
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

from collections.abc import Iterable
from typing import Any

from analysis.data import placement
from analysis.data.cache import DEFAULT_BUDGET, ColumnCache
from analysis.data.ownkeys import (
    chunk_metadata,
    file_stamp,
    kept_entry,
    kept_here,
    lookup,
    own_key,
    tree_nbytes,
)

__all__ = ["OWN_STORE", "CachedColumns", "CachedRunner", "cache_info", "clear_cache"]

#: The token of own processors' store in each process (:mod:`analysis.data.placement`):
#: key -> (columns, the file's stamp), least recently used dropped beyond the budget.
OWN_STORE = "diffcoffea-own"


def _store(proc: CachedColumns) -> ColumnCache:
    """The store of ``proc``'s ``column_store`` in this process (made if absent)."""
    return placement.store(proc.column_store, budget=max(int(proc.column_budget), 0),  # type: ignore[return-value]
                           evict="drop")


def cache_info(token: str = OWN_STORE) -> dict[str, int]:
    """This process's ``{"hits", "misses", "bytes", "chunks"}`` of :class:`CachedColumns`.

    Parameters
    ----------
    token : str, optional
        The processors' ``column_store`` (default :data:`OWN_STORE`).

    Returns
    -------
    dict
        Lookups that found their chunk kept and not, the bytes and chunks kept (zeros
        where this process has no store of ``token``).
    """
    kept = placement.store(token)
    if kept is None:
        return {"hits": 0, "misses": 0, "bytes": 0, "chunks": 0}
    return {"hits": kept.hits, "misses": kept.misses, "bytes": kept.memory_bytes,
            "chunks": len(kept)}


def clear_cache(token: str = OWN_STORE, *, client: Any = None) -> int:
    """Drop the kept columns of ``token`` in this process and, given a dask ``client``, in
    its workers (:func:`analysis.data.placement.drop_everywhere`; :func:`cache_info` then
    starts from zero).

    Parameters
    ----------
    token : str, optional
        The processors' ``column_store`` (default :data:`OWN_STORE`).
    client : distributed.Client, optional
        Keyword-only. The cluster whose workers keep columns.

    Returns
    -------
    int
        The chunks dropped.
    """
    return placement.drop_everywhere(token, client=client)


class CachedColumns:
    """Mix-in for a coffea processor whose chunk inputs are read once per chunk.

    Subclasses define :meth:`columns` and :meth:`process_columns` and inherit
    ``process``. Its options are keyword-only arguments of ``CachedColumns.__init__``
    (call ``super().__init__(column_budget=...)``; a subclass that does not gets the
    defaults, or sets the attributes in its own ``__init__``).

    Parameters
    ----------
    column_budget : int, optional
        Keyword-only. Bytes of kept columns in each process (default
        :data:`~analysis.data.cache.DEFAULT_BUDGET`); 0 keeps none and reads every chunk.
    column_store : str, optional
        Keyword-only. The token of the store the columns are kept in (default
        :data:`OWN_STORE`, shared by every processor of the process: the keys hold the
        class); :func:`clear_cache` with it drops them.
    """

    column_budget: int = DEFAULT_BUDGET
    column_store: str = OWN_STORE

    def __init__(self, *, column_budget: int = DEFAULT_BUDGET,
                 column_store: str = OWN_STORE) -> None:
        super().__init__()
        self.column_budget = int(column_budget)
        self.column_store = column_store

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
        key = own_key(self, metadata)
        stamp = file_stamp(metadata.get("filename")) if key is not None else None
        store = _store(self)
        kept = lookup(store, key, stamp)
        if kept is not None:
            store.hits += 1
            return self.process_columns(kept, metadata)
        store.misses += 1
        columns = self.columns(events)
        if key is not None:
            store.budget = int(self.column_budget)
            store.put(key, (columns, stamp), nbytes=tree_nbytes(columns))
        return self.process_columns(columns, metadata)


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
        store = placement.store(processor_instance.column_store)
        for item in items:
            metadata = chunk_metadata(item)
            key = own_key(processor_instance, metadata)
            if item.filename not in stamps:
                stamps[item.filename] = file_stamp(item.filename)
            kept = kept_entry(store, key, touch=False)
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
            store = _store(processor_instance)
            for columns, metadata, key in found:
                store.get(key)  # the most recently used
                store.hits += 1
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
        chunks = [chunk_metadata(item) for item in items]
        if not chunks or any(own_key(processor_instance, m) is None for m in chunks):
            return [], f"{len(chunks)} chunks, not all with a file UUID"
        # One round trip: every worker computes the chunks it keeps with their files
        # unchanged and says which it keeps with a changed file (a question first and
        # pinned tasks after cost a second one: 0.30x -> 0.25x a plain pass at 4 chunks
        # of 50k). The keys are made in the workers, from the processor as they unpickle
        # it (a class defined in a function comes back under another __qualname__).
        answers = placement.on_workers(client, _serve_kept, processor_instance.column_store,
                                       processor_instance, chunks)
        # each chunk from the first worker (by address) that kept it with its file
        # unchanged (a chunk kept by two workers, read there in passes without
        # worker_affinity, was computed by both)
        outputs: dict[int, Any] = {}
        changed: set[str] = set()
        served = set()
        for address in sorted(answers):
            done, stale = answers[address] or ([], [])  # None: no store on that worker
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


def _serve_kept(store: ColumnCache, processor_instance: CachedColumns,
                chunks: list[dict]) -> tuple[list[tuple[int, Any]], list[int]]:
    """In a dask worker (:func:`analysis.data.placement.on_workers`): ``[(index,
    process_columns(kept, metadata)), ...]`` for the chunks (their metadata, in order)
    kept in its ``store`` with their file unchanged, and the indices of those kept with a
    changed file (not computed)."""
    kept, stale = kept_here(store, processor_instance, chunks)
    out = []
    for index in kept:
        metadata = chunks[index]
        key = own_key(processor_instance, metadata)
        store.hits += 1
        out.append((index, processor_instance.process_columns(store.get(key)[0], metadata)))
    return out, stale
