"""Dense per-event views of flat jagged collections for :mod:`analysis.select.objects` (pure JAX).

A collection arrives as flat columns (values of all objects, per-event ``starts`` and
``counts``); :func:`layout` turns them into a :class:`Layout` of dense ``(events, M)``
indices, ``M = max_objects``; entries beyond an event's count are padding. Caps are
checked on the host by :func:`check_counts` (:class:`ObjectCapError`, one line).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from analysis.errors import InputError

__all__ = ["Layout", "ObjectCapError", "check_counts", "layout", "take"]


class ObjectCapError(InputError):
    """An event has more objects, or an observable more candidate tuples, than a cap allows."""



# --- layout ----------------------------------------------------------------------------


class Layout(NamedTuple):
    """Dense view of one collection in one chunk (a pytree of arrays).

    ``index``: ``(E, M)`` int32 flat index of the ``m``-th object of each event (0 for
    padding); ``valid``: ``(E, M)`` bool, ``m < count``; ``overflow``: ``(E,)`` bool,
    ``count > M`` (such events get NaN results).
    """

    index: jnp.ndarray
    valid: jnp.ndarray
    overflow: jnp.ndarray

    def dense(self, values, *, fill=0.0):
        """Flat per-object ``values`` ``(N,)`` as ``(E, M)``, ``fill`` at padding."""
        values = jnp.asarray(values)
        if values.shape[0] == 0:
            return jnp.full(self.index.shape, fill, dtype=values.dtype)
        return jnp.where(self.valid, values[self.index], fill)

    def flat(self, dense, n_objects: int):
        """Inverse of :meth:`dense`: ``(E, M)`` back to flat ``(n_objects,)`` (0 where no
        dense entry maps to an object)."""
        target = jnp.where(self.valid, self.index, n_objects)
        out = jnp.zeros((n_objects,), dtype=dense.dtype)
        return out.at[target.reshape(-1)].set(dense.reshape(-1), mode="drop")


def layout(starts, counts, max_objects: int) -> Layout:
    """:class:`Layout` of a collection with per-event ``starts`` and ``counts`` (``(E,)``
    ints) and at most ``max_objects`` objects per event (static). Empty input (``E = 0``)
    gives empty arrays."""
    starts = jnp.asarray(starts, dtype=jnp.int32)
    counts = jnp.asarray(counts, dtype=jnp.int32)
    pos = jnp.arange(max_objects, dtype=jnp.int32)
    valid = pos[None, :] < counts[:, None]
    index = jnp.where(valid, starts[:, None] + pos[None, :], 0)
    return Layout(index, valid, counts > max_objects)


def check_counts(
    counts, max_objects: int, *, collection: str, source: str | None = None, offset: int = 0,
    key: str | None = None, of=None,
) -> None:
    """Raise :class:`ObjectCapError` (one line) if an event of ``collection`` has more
    than ``max_objects`` objects (host side, on concrete counts). ``source`` (a file)
    and ``offset`` (its first entry) locate the event; ``key`` names the setting to
    raise; ``of``: all objects per event where ``counts`` are only those a hard
    pre-selection leaves (named in the message). Nothing is truncated: beyond a cap
    there is no result."""
    counts = np.asarray(counts)
    if counts.size and int(counts.max()) > max_objects:
        event = int(np.argmax(counts))
        where = f"{source}: " if source else ""
        n = int(counts.max())
        total = n if of is None else int(np.asarray(of)[event])
        what = "objects" if total == n else f"objects past the width-0 cuts (of {total})"
        raise ObjectCapError(
            f"{where}collection {collection!r}: event {offset + event} has "
            f"{n} {what}, more than max_objects={max_objects}; raise "
            f"{key or 'the cap'}"
        )


def take(values, index):
    """``values[e, index[e, t]]``: per-event gather of ``(E, M)`` values at ``(E, T)``
    object indices (as returned by :func:`leading`)."""
    return jnp.take_along_axis(values, index, axis=1)
