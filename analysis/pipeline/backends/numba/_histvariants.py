"""The variants of a chunk that :mod:`analysis.pipeline.backends.numba.fasthist` walks: a
shift's columns (:func:`_shifted`) and the walk order of a collection's objects in each
(:func:`_order`: the nominal one wherever a shift keeps it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis.pipeline import scorecols
from analysis.pipeline.backends.numba._chunkmemo import remember
from analysis.pipeline.backends.numba.fastkernel import _run_blocks
from analysis.pipeline.backends.numba.kernels import _numba_hist
from analysis.pipeline.layout import ChunkColumns

__all__: list[str] = []


def _shifted(cols: ChunkColumns, key: str, factor: float) -> ChunkColumns:
    """``cols`` with the column ``key`` (``C:f`` or ``event:K``) times ``factor`` and
    the scores of the shifted inputs in place of the nominal ones
    (:func:`analysis.pipeline.scorecols.shifted`; new dicts: the cached columns are not
    touched)."""
    return scorecols.shifted(cols, key, factor)


def _order(memo: dict, ranked: dict, c: str, rank: str, side, off: np.ndarray, flat: dict,
           src: tuple, blocks, threads) -> tuple[np.ndarray, Any]:
    """``(order, whose)``: collection ``c``'s objects by descending ``rank``
    (:func:`analysis.pipeline.backends.numba.kernels._numba_hist.rank_order`) in the variant ``side`` (None:
    the nominal columns, else its shift ``(column, factor)``; ``flat``: its fields), and
    whose order that is: the nominal one (None) wherever it still holds
    (:func:`analysis.pipeline.backends.numba.kernels._numba_hist.is_rank_order`: a shift by a positive factor
    keeps it in all but rare near-ties), else the variant's own (``side``). The orders
    of one pass over the chunk are kept in ``ranked``; whether the nominal order holds
    for a variant (no parameter changes it) in the chunk's ``memo``, with ``src``, the
    nominal counts and ranking field it comes from
    (:func:`analysis.pipeline.backends.numba._chunkmemo.remember`: a bool per variant, where the
    orders themselves would weigh as much as two of the chunk's columns)."""

    def own():
        out = np.empty(int(off[-1]), np.int64)
        key = np.ascontiguousarray(flat[rank], np.float64)
        _run_blocks(_numba_hist.rank_order, (off, key, out, blocks[0]), blocks[1], threads)
        return out

    if side is None:
        if (c, rank) not in ranked:
            ranked[c, rank] = own()
        return ranked[c, rank], None
    nominal = ranked.get((c, rank))
    if nominal is not None and remember(
            memo, ("holds", c, rank, side), src, lambda: bool(_numba_hist.is_rank_order(
                off, np.ascontiguousarray(flat[rank], np.float64), nominal))):
        return nominal, None
    return own(), side
