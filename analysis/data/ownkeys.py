"""What an own processor's kept chunk is (:mod:`analysis.data.owncache`): its key, its
file's stamp, its size, and which of a list of chunks a store keeps.

The key is the one chunk key (:func:`analysis.data.cache.chunk_key`) with the processor's
class and ``column_key()`` as what is read, and the dataset and the fileset's metadata of
it as what else the columns depend on. A kept chunk is ``(columns, stamp)``: the file's
size and modification time when its columns were read (a file rewritten in place is read
again).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from analysis.data.cache import ColumnCache, chunk_key
from analysis.stats._closure import padded_nbytes
from analysis.stats.jagged import Jagged

__all__ = ["chunk_metadata", "file_stamp", "kept_entry", "kept_here", "lookup", "own_key",
           "tree_nbytes"]


def file_stamp(filename: Any) -> tuple[int, int] | None:
    """The file's stamp: what says it was not rewritten since its columns were read.

    Parameters
    ----------
    filename : str
        The chunk's file (coffea's ``metadata["filename"]``).

    Returns
    -------
    tuple or None
        ``(size, mtime_ns)`` of a local file; None where it cannot be stat'ed (a URL).
    """
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


def own_key(proc: Any, metadata: Mapping) -> tuple | None:
    """The kept columns' key of an own processor's chunk.

    Every piece of metadata that the processor's ``columns`` may read is in it: the
    dataset and the fileset's own metadata (two datasets on one file, data without
    ``genWeight`` and MC with it, have columns of their own).

    Parameters
    ----------
    proc : CachedColumns
        The processor (its class, ``column_key()`` and ``column_budget``).
    metadata : Mapping
        The chunk's ``events.metadata`` (or :func:`chunk_metadata` of its work item).

    Returns
    -------
    tuple or None
        The :func:`~analysis.data.cache.chunk_key`; None where the chunk is not kept (no
        file UUID, budget 0, or metadata without a hashable description).
    """
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


def kept_entry(kept: ColumnCache | None, key: tuple | None, *,
               touch: bool = True) -> tuple[Any, Any] | None:
    """``(columns, stamp)`` kept under ``key`` in the store ``kept``, or None."""
    if kept is None or key is None or not kept.holds(key):
        return None
    return kept.get(key, touch=touch)


def lookup(kept: ColumnCache, key: tuple | None, stamp: Any) -> Any:
    """The kept columns of ``key`` if their file is unchanged (else the entry is dropped)."""
    entry = kept_entry(kept, key)
    if entry is None:
        return None
    if entry[1] != stamp:  # the file was rewritten since its columns were read
        kept.discard(key)  # type: ignore[arg-type]
        return None
    return entry[0]


def tree_nbytes(columns: Any) -> int:
    """Bytes a pytree of columns holds (a ``Jagged`` with the padded copy it keeps)."""
    total = 0
    for leaf in jax.tree_util.tree_leaves(columns, is_leaf=lambda x: isinstance(x, Jagged)):
        if isinstance(leaf, Jagged):
            # with the padded copy that stats.derive keeps with it (Jagged.kept)
            total += tree_nbytes([leaf.values, leaf.offsets]) + padded_nbytes(leaf)
            continue
        nbytes = getattr(leaf, "nbytes", None)
        total += int(nbytes) if nbytes is not None else np.asarray(leaf).nbytes
    return total


def chunk_metadata(item: Any) -> dict:
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


def kept_here(store: ColumnCache, processor_instance: Any,
              chunks: list[dict]) -> tuple[list[int], list[int]]:
    """Which of ``chunks`` a store keeps (in a dask worker: its store).

    Parameters
    ----------
    store : ColumnCache
        The store.
    processor_instance : CachedColumns
        The processor whose chunks they are.
    chunks : list of dict
        The chunks' metadata (:func:`chunk_metadata`).

    Returns
    -------
    tuple of two lists
        The indices of the chunks kept with their file unchanged, and of those kept
        with a changed file.
    """
    kept: list[int] = []
    stale: list[int] = []
    stamps: dict[Any, Any] = {}
    for index, metadata in enumerate(chunks):
        key = own_key(processor_instance, metadata)
        filename = metadata["filename"]
        entry = kept_entry(store, key, touch=False)
        if entry is None:
            continue
        if filename not in stamps:
            stamps[filename] = file_stamp(filename)
        (kept if entry[1] == stamps[filename] else stale).append(index)
    return kept, stale
