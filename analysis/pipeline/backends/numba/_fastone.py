"""The host side of the numba kernel's fused one-set loop (numpy): its tables on the chain.

:func:`run` takes the fused loop's arguments with the count model's full tables (the
state after adding an object of the set, ``tgt``; the pass table ``f`` and its tangents
``df`` over all states) and runs :func:`analysis.pipeline.backends.numba.kernels._numba_one.select_one` on the
chain of states the objects reach, ``0, tgt[0], tgt[tgt[0]], ...`` (one pattern adds to
the counts, so no other state is ever reached), compiled without tangents (``df = 0.0``)
when nothing is differentiated (no trainable cut or count threshold: values only, the
same floats). Used by
:mod:`analysis.pipeline.backends.numba.fastkernel` only.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba._fastpool import _run_blocks
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_one

__all__: list[str] = []  # internal to the numba kernel


def chain(tgt: np.ndarray) -> np.ndarray:
    """The states ``0, tgt[0], tgt[tgt[0]], ...`` up to the absorbing one (``tgt[k] = k``)."""
    out = [0]
    while tgt[out[-1]] != out[-1] and len(out) <= len(tgt):
        out.append(int(tgt[out[-1]]))
    return np.array(out, np.int64)


def run(args: tuple, n_blocks: int, threads: int | None) -> None:
    """``select_one`` over ``n_blocks`` blocks on the kernel's threads with ``args`` =
    ``(coff, ss, cut_w, cut_g, cut_par, tgt, f, df, want_w, max_seq, block, pe, ow)``
    (see :func:`~analysis.pipeline.backends.numba.kernels._numba_one.select_one`; ``tgt``, ``f``, ``df`` over
    all count states)."""
    *cuts, tgt, f, df, want_w, max_seq, block, pe, ow = args
    states = chain(tgt)
    f = np.ascontiguousarray(f[states])
    # nothing to differentiate: the variant without tangents (lane 0 only, df = 0.0)
    df = 0.0 if np.all(cuts[-1] < 0) and not np.any(df) else np.ascontiguousarray(df[states])
    one = (*cuts, f, df, want_w, max_seq, block, pe, ow)
    _run_blocks(_numba_dp.compiled(_numba_one.select_one, one), one, n_blocks, threads)
