"""A chunk's kernels on a thread of their own while the executor reads the next chunk.

coffea's iterative executor runs ``process`` on one chunk after the other: the file is
read, then the kernels run, then the next file is read. The kernels release the GIL
(numba's ``nogil``, numpy), and so does most of reading (decompression), so the two
can overlap. :func:`defer` runs a chunk's computation on this process's chunk thread
and returns at once a :class:`Deferred`, which coffea's ``accumulate`` adds like any
output; the driver resolves what the pass returned with :func:`settle`.

At most one chunk computes at a time (one chunk thread), and at most :data:`AHEAD`
chunks are submitted and not finished (:func:`defer` waits for the oldest first): the
columns of at most three chunks are held (one computing, one waiting, one being read;
a chunk slower to compute than to read can wait while the next one is read),
and the outputs are merged in chunk order as they finish (a :class:`Deferred` keeps
the left fold of its finished prefix), with coffea's own ``add`` and ``iadd``, so the
merged states are those of the pass without overlap, bit for bit. A chunk whose
computation raises becomes its fault record (:func:`analysis.data.faults.fault_record`),
as :func:`analysis.data.faults.guarded` makes it when the computation runs inside
``process``. For in-process executors only (an output that is pickled to another
process cannot hold a future).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

from analysis.data.faults import FAULTS_KEY, Fault, Faults, fault_record
from analysis.runtime.environment import settings

__all__ = ["AHEAD", "Deferred", "defer", "kernel_threads", "on_chunk_thread", "settle"]

# by process id (a forked worker makes its own): the chunk thread, the chunk in flight
_THREAD: dict[int, ThreadPoolExecutor] = {}
_LAST: dict[int, list[Future]] = {}
#: chunks submitted and not finished, at most (one computing, one waiting)
AHEAD = 2


def _thread() -> ThreadPoolExecutor:
    pid = os.getpid()
    if pid not in _THREAD:
        _THREAD.clear()
        _LAST.clear()
        _THREAD[pid] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chunk-kernels")
    return _THREAD[pid]


class _Failed:
    """A chunk's computation that raised: its fault record, or (not a coffea chunk) the
    exception itself, raised again where the output is resolved."""

    __slots__ = ("fault", "error")

    def __init__(self, fault: Fault | None, error: BaseException | None) -> None:
        self.fault, self.error = fault, error


class Deferred:
    """Chunk outputs being computed, in chunk order (module docstring).

    ``a + b`` and ``a += b`` append ``b``'s chunks to ``a``'s (coffea's ``accumulate``
    merges outputs so); the finished front of the list is merged at once into the
    left fold (``add`` for the second value, ``iadd`` after, as coffea's
    ``accumulate``), so at most the chunks still computing are held apart.
    :meth:`result` waits for every chunk: ``(merged value or None, fault records)``.

    Parameters
    ----------
    pending : list of concurrent.futures.Future
        The chunks' computations, in chunk order (each returns the value or a failure).
    """

    __slots__ = ("_acc", "_count", "_pending", "_faults")

    def __init__(self, pending: list[Future]) -> None:
        self._acc: Any = None
        self._count = 0  # values merged into _acc
        self._pending = list(pending)
        self._faults: list[Fault] = []

    def _copy(self) -> Deferred:
        out = Deferred(self._pending)
        out._acc, out._count, out._faults = self._acc, self._count, list(self._faults)
        return out

    def _merge(self, wait: bool) -> None:
        from coffea.processor.accumulator import add, iadd

        while self._pending and (wait or self._pending[0].done()):
            got = self._pending.pop(0).result()
            if isinstance(got, _Failed):
                if got.error is not None:
                    raise got.error
                if got.fault is not None:
                    self._faults.append(got.fault)
                continue
            if self._count == 0:
                self._acc = got
            elif self._count == 1:  # a new object: the chunk's own output stays as it is
                self._acc = add(self._acc, got)
            else:
                self._acc = iadd(self._acc, got)
            self._count += 1

    def __add__(self, other: Deferred) -> Deferred:
        if not isinstance(other, Deferred):
            return NotImplemented
        out = self._copy()
        out += other
        return out

    def __iadd__(self, other: Deferred) -> Deferred:
        if not isinstance(other, Deferred):
            return NotImplemented
        if other._count:  # a merged front of its own: merged as one value (not met in
            other._merge(True)  # coffea's left fold, where the right operand is one chunk)
            self._pending.append(_done(other._acc))
        self._pending += other._pending
        self._faults += other._faults
        self._merge(False)
        return self

    def __deepcopy__(self, memo: dict) -> Deferred:
        # coffea deep-copies an output it meets first; the futures are shared, not copied
        return self._copy()

    def result(self) -> tuple[Any, list[Fault]]:
        """``(value, faults)``: every chunk's value merged in chunk order (None when every
        chunk failed) and the fault records of those that failed."""
        self._merge(True)
        return self._acc, list(self._faults)


def _done(value: Any) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


def defer(compute: Callable[[], Any], events: Any) -> Deferred:
    """``compute()`` (one chunk's output value, no file access) on the chunk thread, once
    fewer than :data:`AHEAD` chunks are submitted and not finished; a raise becomes the fault record of
    chunk ``events`` (:func:`analysis.data.faults.fault_record`)."""

    # the chunk's name for its fault record (not the events: their buffers stay unheld)
    chunk = SimpleNamespace(metadata=dict(getattr(events, "metadata", None) or {}))

    def run() -> Any:
        try:
            return compute()
        except Exception as err:  # noqa: BLE001  (a fault record, as guarded makes it)
            fault = fault_record(chunk, err)
            return _Failed(fault, None) if fault is not None else _Failed(None, err)

    pool = _thread()
    pid = os.getpid()
    ahead = [f for f in _LAST.get(pid, []) if not f.done()]
    if len(ahead) >= AHEAD:
        ahead.pop(0).exception()  # waits; what it raised is in its own result
    future = pool.submit(run)
    _LAST[pid] = [*ahead, future]
    return Deferred([future])


def kernel_threads() -> int | None:
    """The kernel threads of an overlapped pass: the cores numba uses less the one that
    reads the next chunk (at least one; on 2 cores the kernels and the reading then take
    one core each instead of three threads sharing two); None where
    ``DIFFCOFFEA_KERNEL_THREADS`` is set (the kernels read it themselves)."""
    if settings().kernel_threads is not None:
        return None
    import numba

    return max(1, int(numba.config.NUMBA_NUM_THREADS) - 1)


def on_chunk_thread(compute: Callable[[], Any]) -> Any:
    """``compute()`` on the chunk thread (after the chunk in flight), waited for; what it
    raises is raised here. For the driver's own chunk computations (the column cache's
    chunks): every kernel of a pass then runs on the one thread, whose per-thread
    scratch buffers (:func:`analysis.pipeline.backends.numba._fastpool._work`, as large
    as a chunk's objects) are not made a second time for the driver's thread."""
    return _thread().submit(compute).result()


def settle(out: dict) -> dict:
    """``out`` (a pass's merged output) with every :class:`Deferred` value resolved (a key
    whose chunks all failed is left out) and their fault records added to
    ``out[FAULTS_KEY]``."""
    faults: list[Fault] = []
    resolved: dict = {}
    for key, value in out.items():
        if isinstance(value, Deferred):
            value, failed = value.result()
            faults += failed
            if value is None:
                continue
        resolved[key] = value
    if faults:
        late = Faults(faults)
        resolved[FAULTS_KEY] = late if FAULTS_KEY not in resolved else resolved[FAULTS_KEY] + late
    return resolved
