"""The numba kernel's threads (host side): event blocks and element slices on one pool.

The compiled loops release the GIL (``nogil``), and so do numpy's element-wise
functions on large arrays, so contiguous block ranges (:func:`_run_blocks`), blocks
taken a few at a time (:func:`_run_dynamic`, for kernels whose outputs are per block or
per item) or slices (:func:`_run_slices`) run in parallel on a thread pool of this
process. Blocks keep their partial sums apart and are added in block order; slices are
element-wise: the results do not depend on the number of threads. :func:`yield_sums`
runs the selected yield's block sums this way. Used by the numba
kernel's host modules only (:mod:`analysis.pipeline.backends.numba.fastkernel`,
:mod:`analysis.pipeline.backends.numba.fasthist`, :mod:`analysis.pipeline.backends.numba.fastreverse`).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from analysis.pipeline.backends.numba.kernels import _numba_sums
from analysis.runtime.environment import settings
from analysis.select.lanes.policy import host_args

__all__: list[str] = []  # internal to the numba kernel


def _threads(threads: int | None = None) -> int:
    """Threads the kernels run on: ``threads`` if given, else ``DIFFCOFFEA_KERNEL_THREADS``,
    else numba's thread count (the cores, or ``NUMBA_NUM_THREADS``)."""
    if threads is not None:
        return max(1, int(threads))
    chosen = settings().kernel_threads  # DIFFCOFFEA_KERNEL_THREADS (analysis.runtime)
    return chosen if chosen is not None else max(1, int(numba.config.NUMBA_NUM_THREADS))


_POOL: dict[int, ThreadPoolExecutor] = {}  # by process id: a forked worker makes its own
_LOCAL = threading.local()


def splits(n: int, parts: int) -> list[int]:
    """``parts`` contiguous ranges of ``range(n)`` as their ``parts + 1`` edges
    ``n i // parts`` (integers: ``numpy.linspace`` costs more than the short kernels
    it splits)."""
    return [n * i // parts for i in range(parts + 1)]


def _run_blocks(kernel, args: tuple, n_blocks: int, threads: int | None = None) -> None:
    """``kernel(*args, b0, b1)`` over all blocks, in contiguous ranges on the pool (its
    read-only arguments as such: :func:`analysis.select.lanes.policy.host_args`)."""
    threads = max(1, min(_threads(threads), n_blocks))
    args = host_args(kernel, args)
    _run_slices(lambda b0, b1: kernel(*args, b0, b1), splits(n_blocks, threads))


def _run_dynamic(kernel, args: tuple, n_blocks: int, threads: int | None = None) -> None:
    """``kernel(*args, b0, b1)`` over every block, each thread taking the next blocks not
    yet taken: a share of the blocks left (half of them over the threads, at least one;
    blocks of uneven cost even out at the end). A kernel whose outputs are per block or
    per item gives the same results however the blocks are shared. Few calls per
    thread: each returns to Python and takes the GIL, which a thread reading the next
    chunk (:mod:`analysis.data.overlap`) may hold for up to the switch interval. The
    read-only arguments as :func:`_run_blocks`."""
    threads = max(1, min(_threads(threads), n_blocks))
    args = host_args(kernel, args)
    if threads == 1:
        kernel(*args, 0, n_blocks)
        return
    taken = [0]
    lock = threading.Lock()

    def work(_a: int, _b: int) -> None:
        while True:
            with lock:
                b = taken[0]
                k = max(1, (n_blocks - b) // (2 * threads))
                taken[0] = b + k
            if b >= n_blocks:
                return
            kernel(*args, b, min(b + k, n_blocks))

    _run_slices(work, range(threads + 1))


def _pool() -> ThreadPoolExecutor:
    """This process's thread pool (a forked worker makes its own)."""
    pid = os.getpid()
    if pid not in _POOL:
        _POOL.clear()
        _POOL[pid] = ThreadPoolExecutor(thread_name_prefix="fastkernel")
    return _POOL[pid]


def _work(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A per-thread scratch array, reused across chunks; every entry is written before
    it is read."""
    size = int(np.prod(shape))
    buf = getattr(_LOCAL, name, None)
    if buf is None or buf.size < size:
        buf = np.empty(size)
        setattr(_LOCAL, name, buf)
    return buf[:size].reshape(shape)


def _run_slices(fn, edges) -> None:
    """``fn(a, b)`` for consecutive ``edges``: the first range in this thread (one
    wake-up fewer), the others on the pool."""
    futures = [_pool().submit(fn, int(a), int(b))
               for a, b in zip(edges[1:-1], edges[2:], strict=True)]
    try:
        fn(int(edges[0]), int(edges[1]))
    finally:
        for f in futures:
            f.result()


def yield_sums(ev: np.ndarray, pe: np.ndarray, np1: int, block: int,
               threads: int | None = None) -> np.ndarray:
    """``(2, np1)``: ``[sum w_e, sum w_e^2]`` and their tangents (columns 1..np1-1) from
    ``ev``, ``pe`` (``(E, LANES)``, float64; ``ev`` of shape ``(E,)``: the event weights
    without tangents, as lane 0 of an ``ev`` whose other lanes are zero, the same floats);
    zeros for no events. Blocks on the kernel's threads (:func:`_run_blocks`: the same
    floats for any number), as
    :func:`analysis.pipeline.backends.numba.kernels._numba_sums.block_sums`."""
    n_blocks = max(1, -(-ev.shape[0] // block))
    out = np.zeros((n_blocks, 2, np1))
    _run_blocks(_numba_sums.block_sums, (ev, pe, np1, block, out), n_blocks, threads)
    return out.sum(axis=0)
