"""The objects' pattern probabilities of :mod:`analysis.pipeline.backends.numba.fasthist`'s walks (numpy host side).

:func:`patterns_into` writes the pattern probabilities of one variant or of a pair of
shift sides straight into the walk's layout (:mod:`analysis.pipeline.backends.numba.kernels._numba_hist`) with
:func:`analysis.pipeline.backends.numba.kernels._numba_fill.cut_patterns` over object blocks on the kernel
threads (per-object outputs: no bit depends on the threads or the blocks).
:func:`cut_arrays`: one collection's soft cuts as that kernel's arrays.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba._fastpool import (
    _run_blocks,
    _run_slices,
    _threads,
    _work,
    splits,
)
from analysis.pipeline.backends.numba._fasttables import _par_index, _value
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_fill

__all__ = ["OBJ_BLOCK", "balanced_blocks", "cut_arrays", "patterns_into", "soft_range"]

# Objects per block of the cuts and patterns (per-object outputs: no bit depends on it).
OBJ_BLOCK = 8192
# cut_arrays of no cuts (the fixed cuts of the nominal variant)
_NO_CUTS = (np.zeros((0, 1)), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
            np.zeros(0, np.bool_), np.zeros(0, np.int64))


def balanced_blocks(n: int, per: int, threads: int | None) -> tuple[int, int]:
    """``(block, n_blocks)`` for ``n`` items in blocks of about ``per``: a multiple of
    the threads' number of blocks, so that :func:`analysis.pipeline.backends.numba.fastkernel._run_blocks`
    (a contiguous range of blocks per thread) gives each thread an equal share. Only for
    loops whose outputs are per item (the block size changes no bit)."""
    n_thr = _threads(threads)
    n_blocks = n_thr * max(1, -(-n // (n_thr * per)))
    block = max(1, -(-n // n_blocks))
    return block, max(1, -(-n // block))


def _soft_values(cuts, flat: dict, theta, widths, ss: np.ndarray, threads: int | None) -> None:
    """The cuts' probabilities (:func:`analysis.pipeline.backends.numba.kernels._numba_dp.soft_values`) of every
    object into ``ss`` (``(C, N)``), in contiguous slices on the pool (element-wise: the
    same floats for any number of threads)."""
    n = ss.shape[1]
    parts = min(_threads(threads), max(1, n // 65536))
    _run_slices(lambda a, b: soft_range(cuts, flat, theta, widths, ss, a, b), splits(n, parts))


def soft_range(cuts, flat: dict, theta, widths, ss: np.ndarray, a: int, b: int) -> None:
    """:func:`_soft_values` of objects ``a:b`` alone, in this thread (element-wise: the
    same floats as a whole-array call; a thread that then walks the events of these
    objects fills them itself, :func:`analysis.pipeline.backends.numba.fastkernel._weights`)."""
    for i, cut in enumerate(cuts):
        _numba_dp.soft_values(flat[cut.field][a:b], _value(theta, cut.param, cut.value),
                              widths[cut.width_index], cut.greater, cut.inclusive,
                              cut.absolute, ss[i, a:b])


def cut_arrays(cuts, flat: dict, n_obj: int, theta, widths, trainable, threads,
               name: str = "hist_cols") -> tuple:
    """The cuts ``[(ls, cut), ...]`` of one collection as the arrays of
    :mod:`analysis.pipeline.backends.numba.kernels._numba_fill` (``cols`` first: each cut's probabilities,
    :func:`analysis.pipeline.backends.numba.kernels._numba_dp.soft_values` on the threads, in the per-thread
    scratch ``name``, valid until its next use)."""
    cols = _work(name, (len(cuts), n_obj))
    _soft_values([cut for _, cut in cuts], flat, theta, widths, cols, threads)
    return (cols, np.array([ls for ls, _ in cuts], np.int64),
            np.arange(len(cuts), dtype=np.int64),
            np.array([widths[c.width_index] for _, c in cuts], np.float64),
            np.array([c.greater for _, c in cuts], np.bool_),
            np.array([_par_index(trainable, c.param) for _, c in cuts], np.int64))


def patterns_into(tab, coff, base, flats: list, theta, widths, trainable, threads,
                   moved: tuple[str, ...] | None, kept: dict, pv_all, pd_all, page: int = 0) -> None:
    """The pattern probabilities of one variant or a pair (``flats``: the columns of
    each) in the walk's layout: ``pv_all[:, :, 0]`` and ``[:, :, 1]``, tangents in
    ``pd_all`` (all lanes of one variant, or lanes 0-3 of each side by side; a pair's
    ``page`` 1: ``pv_all[:, :, 2:4]`` and lanes 8-15, the second pair of two), by
    :func:`analysis.pipeline.backends.numba.kernels._numba_fill.cut_patterns` (``cut_patterns4``
    with at most 3 tangents; ``cut_patterns_pair``: a pair, at most 3 tangents) on the
    threads. ``kept``: one
    chunk's cut probabilities, ``kept[None][ci]`` the nominal variant's (computed
    first: the nominal walk precedes the shifts), ``kept[moved][ci]`` the rows of those
    that a shift does not move (``moved``: the columns it moves, ``C:f``: the shifted
    one and the scores of its inputs, :func:`analysis.pipeline.scorecols.moved_columns`). A shift side takes
    those rows as they are (the same inputs: the same floats) and evaluates only the
    moved cuts again, their factors multiplied last."""
    for ci, c in enumerate(tab.collections):
        n_obj = int(coff[ci, -1])
        if not n_obj:
            continue
        n_sets = int(tab.n_coll_sets[ci])
        cuts = [(ls, cut) for ls in range(n_sets)
                for cut in tab.set_cuts[int(tab.coll_sets[ci, ls])]]
        block, n_blocks = balanced_blocks(n_obj, OBJ_BLOCK, threads)
        if moved is None:
            own, rest = cuts, _NO_CUTS
            # per-thread scratch of its own per collection: the shift sides read it later
            lo, *arrays = kept.setdefault(None, {})[ci] = cut_arrays(
                own, flats[0][c], n_obj, theta, widths, trainable, threads, f"hist_nominal:{ci}")
        else:
            fixed = kept.setdefault(moved, {})
            if ci not in fixed:
                cols, *rows = kept[None][ci]
                keep = np.array([f"{c}:{cut.field}" not in moved for _, cut in cuts], np.bool_)
                fixed[ci] = (cols, *(r[keep] for r in rows))
            rest = fixed[ci]
            own = [(ls, cut) for ls, cut in cuts if f"{c}:{cut.field}" in moved]
            lo, *arrays = cut_arrays(own, flats[0][c], n_obj, theta, widths, trainable, threads)
        if len(flats) == 1:
            # at most 3 tangents: the cuts and patterns over 4 lanes (the same floats)
            kernel = _numba_fill.cut_patterns4 if len(trainable) <= 3 else _numba_fill.cut_patterns
            cols = (lo,)
        elif len(trainable) > 3:  # the pair kernel's 4 lanes: no bounds check in numba
            raise ValueError(f"a pair of shift sides carries at most 3 tangents, not "
                             f"{len(trainable)}")
        else:
            kernel = _numba_fill.cut_patterns_pair
            cols = (lo, cut_arrays(own, flats[1][c], n_obj, theta, widths, trainable, threads,
                                   "hist_cols_hi")[0])
        args = (*cols, *arrays, *rest, tab.pat[ci], n_sets, int(tab.n_pat[ci]), int(base[ci]),
                pv_all, pd_all, *((page,) if len(flats) == 2 else ()), block)
        _run_blocks(_numba_dp.compiled(kernel, args), args, n_blocks, threads)
