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

Key: the processor's class, its :meth:`CachedColumns.column_key` (constructor options
that change the columns), the file's UUID (coffea's ``metadata["fileuuid"]``), the tree
and the entry range. A file rewritten at the same path has a new UUID: its old entries
are never used. Chunks without a UUID (not from a Runner) are not kept.

Where the columns live: in the process that ran the chunk, up to ``column_budget``
bytes (default :data:`analysis.data.cache.DEFAULT_BUDGET`, the YAML path's in-memory
budget); beyond it the least recently used chunks are dropped (read again when met).
So it works where the processes outlive a pass: the iterative executor (the driver's
process), dask (the cluster's workers, while the client lives) and futures with a pool
kept across passes (``processor.FuturesExecutor(pool=ProcessPoolExecutor(2))``; a
``FuturesExecutor(workers=2)`` starts new processes per Runner call, which read again).
With several workers a chunk is reused only where it lands on a worker that kept it;
each worker keeps up to its own budget.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import jax
import numpy as np

from analysis.data.cache import DEFAULT_BUDGET

__all__ = ["CachedColumns", "cache_info", "clear_cache"]

# This process's kept columns: key -> (columns, bytes), least recently used first.
_KEPT: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
_STATS = {"hits": 0, "misses": 0, "bytes": 0}


def _nbytes(columns: Any) -> int:
    total = 0
    for leaf in jax.tree_util.tree_leaves(columns):
        nbytes = getattr(leaf, "nbytes", None)
        total += int(nbytes) if nbytes is not None else np.asarray(leaf).nbytes
    return total


def cache_info() -> dict[str, int]:
    """This process's ``{"hits", "misses", "bytes", "chunks"}`` of :class:`CachedColumns`."""
    return {**_STATS, "chunks": len(_KEPT)}


def clear_cache() -> None:
    """Drop this process's kept columns (and reset :func:`cache_info`)."""
    _KEPT.clear()
    _STATS.update(hits=0, misses=0, bytes=0)


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
        uuid = metadata.get("fileuuid")
        key = None
        if uuid and int(self.column_budget) > 0:  # budget 0: neither kept nor looked up
            key = (
                type(self).__module__, type(self).__qualname__, self.column_key(), uuid,
                metadata.get("treename"), metadata.get("entrystart"), metadata.get("entrystop"),
            )
        kept = _KEPT.get(key) if key is not None else None
        if kept is not None:
            _KEPT.move_to_end(key)
            _STATS["hits"] += 1
            return self.process_columns(kept[0], metadata)
        _STATS["misses"] += 1
        columns = self.columns(events)
        if key is not None:
            size = _nbytes(columns)
            budget = int(self.column_budget)
            if size <= budget:
                while _KEPT and _STATS["bytes"] + size > budget:
                    _, (_, dropped) = _KEPT.popitem(last=False)
                    _STATS["bytes"] -= dropped
                _KEPT[key] = (columns, size)
                _STATS["bytes"] += size
        return self.process_columns(columns, metadata)
