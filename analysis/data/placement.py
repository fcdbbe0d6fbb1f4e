"""Where kept columns live: one store per process and token, reached and dropped one way.

The one column cache (:mod:`analysis.data.cache`: :func:`~analysis.data.cache.chunk_key`
and :class:`~analysis.data.cache.ColumnCache`) is placed the same way for the YAML engine
and for own processors (:mod:`analysis.data.owncache`), on every executor:

- **A per-process registry keyed by token.** :func:`store` is the one way to reach this
  process's store of a token: the driver's own cache where its owner registered it
  (:func:`register`: the :class:`~analysis.driver.runner.Evaluator`, which closes it), or
  a store the registry made on first use with a budget (a dask worker's cache of the
  chunks it read for a driver's evaluator; an own processor's store, token
  :data:`analysis.data.owncache.OWN_STORE` unless the processor names another, in
  whichever process runs it). A copy inherited by a forked process is never used
  (checked by its pid): the fork starts empty.
- **Dropped explicitly.** :func:`drop` closes this process's store of a token (its spill
  files go) if the registry made it; :func:`drop_everywhere` does that here and, given a
  dask client, on every worker. The evaluator calls it when it closes;
  :func:`analysis.data.owncache.clear_cache` for own processors.
- **On dask**, a worker's store is reached only through :func:`on_worker` (a task pinned
  to one worker: the YAML engine's later passes, its moves between workers) and
  :func:`on_workers` (``client.run`` on every worker: own processors' kept chunks served
  by :class:`~analysis.data.owncache.CachedRunner`); both call ``fn(store, *args)``
  there, on that worker's store of the token (``None`` where it has none).

Where a chunk's columns go after a first pass reads it (:func:`keep_columns`, the YAML
engine's processor): into the owner's registered cache where the chunk runs in the
driver's process (iterative); into the worker's store on dask (only the chunk's place,
the worker's address, travels back: a :class:`~analysis.data.cache.ColumnPlaces`);
elsewhere (a futures pool) back with the chunk's output, in a
:class:`~analysis.data.cache.ColumnBatch`. Own processors keep theirs in the store of
the process that ran the chunk.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

from analysis.data.cache import (
    COLUMNS_KEY,
    PLACES_KEY,
    ColumnBatch,
    ColumnCache,
    ColumnPlaces,
)
from analysis.pipeline.layout import ChunkColumns

__all__ = [
    "adopt",
    "drop",
    "drop_everywhere",
    "in_store",
    "keep_columns",
    "on_worker",
    "on_workers",
    "register",
    "store",
    "take",
    "worker_address",
]

# The registry of this process, by token: every store (weakly: a registered store lives
# as long as its owner) and, strongly, those the registry made (nothing else in a dask
# worker holds them between tasks), until drop(token).
_STORES: weakref.WeakValueDictionary[str, ColumnCache] = weakref.WeakValueDictionary()
_MADE: dict[str, ColumnCache] = {}


def register(cache: ColumnCache) -> None:
    """Make ``cache`` this process's store of ``cache.token`` (its owner keeps and closes it).

    Parameters
    ----------
    cache : ColumnCache
        The driver's cache; chunks run in this process find it with :func:`store`.
    """
    _STORES[cache.token] = cache


def store(token: str | None, *, budget: int | None = None, evict: str = "spill") -> ColumnCache | None:
    """This process's store of ``token``; made (with ``budget`` and ``evict``) if absent
    and a budget is given, else ``None``. A copy inherited by a forked process is never
    used.

    Parameters
    ----------
    token : str or None
        The store's name (``None``: no store).
    budget : int, optional
        Keyword-only. In-memory bytes of a store made here.
    evict : str, optional
        Keyword-only. ``"spill"`` (default) or ``"drop"``, as :class:`ColumnCache`; a store
        of the token made with the other one is a ``ValueError``.

    Returns
    -------
    ColumnCache or None
        The store, or ``None`` where there is none and no budget was given.
    """
    if not token:
        return None
    found = _STORES.get(token)
    if found is not None and found.pid != os.getpid():
        found = None
    if found is None and budget is not None:
        found = _STORES[token] = _MADE[token] = ColumnCache(budget=budget, evict=evict)
    elif found is not None and budget is not None and found.evict != evict:
        raise ValueError(f"column store {token!r}: kept with evict={found.evict!r}, "
                         f"asked for evict={evict!r}")
    return found


def _made_here(token: str | None) -> bool:
    """Whether this process's store of ``token`` is one the registry made (not an owner's)."""
    return token is not None and _MADE.get(token) is not None and _MADE[token] is _STORES.get(token)


def drop(token: str) -> int:
    """Close this process's store of ``token`` if the registry made it (its spill files go;
    an owner's registered cache is left to its owner); the chunks it held.

    Parameters
    ----------
    token : str
        The store's name.

    Returns
    -------
    int
        The chunks the closed store held (0: none here).
    """
    made = _MADE.pop(token, None)
    if made is None:
        return 0
    if _STORES.get(token) is made:
        del _STORES[token]
    if made.pid != os.getpid():  # a forked copy: its spill files are its parent's
        return 0
    n = len(made)
    made.close()
    return n


def drop_everywhere(token: str, *, client: Any = None) -> int:
    """:func:`drop` in this process and, given a dask ``client``, on each of its workers.

    Parameters
    ----------
    token : str
        The store's name.
    client : distributed.Client, optional
        Keyword-only. The cluster whose workers hold stores of ``token``.

    Returns
    -------
    int
        The chunks the closed stores held, all together.
    """
    n = drop(token)
    if client is not None:
        n += sum(client.run(drop, token).values())
    return n


def in_store(fn: Callable[..., Any], token: str, budget: int | None, evict: str, *args: Any) -> Any:
    """``fn(store, *args)`` on this process's store of ``token`` (made with ``budget`` if
    given); ``None`` where there is none. What :func:`on_worker` and :func:`on_workers`
    run in a worker."""
    found = store(token, budget=budget, evict=evict)
    return None if found is None else fn(found, *args)


def on_worker(client: Any, address: str, fn: Callable[..., Any], token: str, *args: Any,
              budget: int | None = None, evict: str = "spill") -> Any:
    """A task pinned to the worker at ``address`` that runs ``fn(store, *args)`` on its
    store of ``token`` (``None`` where it has none, unless ``budget`` makes one).

    Parameters
    ----------
    client : distributed.Client
        The cluster's client.
    address : str
        The worker (the task never runs elsewhere).
    fn : callable
        ``fn(store, *args)``, a module-level function (it travels by reference).
    token : str
        The store's name.
    *args
        ``fn``'s other arguments (futures among them are their results there).
    budget : int, optional
        Keyword-only. Make the store with this budget where it is absent.
    evict : str, optional
        Keyword-only. The made store's ``evict`` (:func:`store`).

    Returns
    -------
    distributed.Future
        The task's future.
    """
    return client.submit(in_store, fn, token, budget, evict, *args, workers=[address],
                         allow_other_workers=False, pure=False)


def on_workers(client: Any, fn: Callable[..., Any], token: str, *args: Any) -> dict[str, Any]:
    """``fn(store, *args)`` on every worker's store of ``token`` (``client.run``).

    Parameters
    ----------
    client : distributed.Client
        The cluster's client.
    fn : callable
        ``fn(store, *args)``.
    token : str
        The store's name.
    *args
        ``fn``'s other arguments.

    Returns
    -------
    dict
        ``{worker address: fn's result}``; ``None`` for a worker without a store of ``token``.
    """
    return client.run(in_store, fn, token, None, "spill", *args)


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


def keep_columns(
    key: tuple, cols: ChunkColumns, *, token: str | None, worker_budget: int | None = None
) -> dict:
    """Keep one chunk's columns for the driver's cache ``token`` (the YAML engine); what to
    add to the chunk's output: nothing in the driver's process (its registered cache),
    ``{PLACES_KEY: ColumnPlaces}`` in a dask worker when ``worker_budget`` is given (the
    worker's store, made with that budget), else ``{COLUMNS_KEY: ColumnBatch}`` (the
    columns themselves)."""
    here = store(token)
    if here is not None and not _made_here(token):
        here.put(key, cols)
        return {}
    address = worker_address() if worker_budget is not None and token else None
    if address is not None:
        store(token, budget=worker_budget).put(key, cols)  # type: ignore[union-attr]
        return {PLACES_KEY: ColumnPlaces({key: address})}
    return {COLUMNS_KEY: ColumnBatch({key: cols})}


def take(kept: ColumnCache, key: tuple) -> Any:
    """The columns of ``key`` in ``kept``, removed from it (the first half of a move to
    another worker; ``None`` if it does not have them)."""
    if not kept.holds(key):
        return None
    cols = kept.get(key)
    kept.discard(key)
    return cols


def adopt(kept: ColumnCache, key: tuple, cols: Any) -> bool | None:
    """Keep ``cols`` under ``key`` in ``kept`` (the second half of a move); ``None`` if
    there was nothing to move (the driver then reads the chunk again)."""
    if cols is None:
        return None
    kept.put(key, cols)
    return True
