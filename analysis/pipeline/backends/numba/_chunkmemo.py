"""Per-chunk data that no parameter changes, kept as long as the chunk's columns live.

An optimisation evaluates the same cached :class:`~analysis.pipeline.layout.ChunkColumns`
object at every step (:mod:`analysis.data.cache`). What the kernels derive from the
columns alone (whether a shift keeps a collection's rank order: a pass over the
objects, for one bool) is then the same at every step: :func:`chunk_memo` gives a dict
that lives exactly as long as the columns object, for such data under keys that name
what it was made from (never a plan's identity); :func:`remember` keeps each entry
with the arrays it was made from and makes it again if one of them was replaced.
Only small results belong here: nothing bounds the memo's size (the column cache's
budget counts the columns alone), and arrays as large as a column would add to the
cache's memory by as much. Nothing is stored in the columns
object itself: it is pickled, spilled to disk and copied by ``dataclasses.replace``
as before, and a copy starts with a memo of its own.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["chunk_memo", "remember"]

# id(columns) -> (weak reference to them, their memo); an entry leaves when its columns
# die (the weak reference's callback runs before their id can be reused)
_MEMOS: dict[int, tuple[weakref.ref, dict]] = {}


def chunk_memo(cols: Any) -> dict:
    """The memo of the columns object ``cols`` (by identity; empty at first)."""
    key = id(cols)
    entry = _MEMOS.get(key)
    if entry is not None and entry[0]() is cols:
        return entry[1]
    memo: dict = {}
    _MEMOS[key] = (weakref.ref(cols, lambda _ref, key=key: _MEMOS.pop(key, None)), memo)
    return memo


def remember(memo: dict, key: Any, sources: tuple, make: Callable[[], Any]) -> Any:
    """``make()``, kept in ``memo`` under ``key`` with the arrays ``sources`` it is made
    from, and made again when any of them is no longer the same object (columns whose
    arrays were replaced since; arrays are never written in place once read)."""
    hit = memo.get(key)
    if hit is None or len(hit[0]) != len(sources) or any(
            a is not b for a, b in zip(hit[0], sources, strict=True)):
        hit = memo[key] = (tuple(sources), make())
    return hit[1]
