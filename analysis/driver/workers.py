"""Passes over chunks whose columns dask workers keep: tasks pinned to those workers.

:class:`WorkerTasks` is the part of :class:`analysis.driver.runner.Evaluator` (which
inherits it) that sends a cached chunk's evaluation to the worker keeping its columns
(:meth:`WorkerTasks._submit`), gathers the outputs while watching for dead workers
(:meth:`WorkerTasks._gather`, every :data:`WORKER_POLL` seconds) and evens out the
chunks the workers keep (:meth:`WorkerTasks._rebalance`). It uses the evaluator's
``_client`` and ``cache`` (:class:`~analysis.data.cache.ColumnCache`), and reaches the
workers' stores the one way :mod:`analysis.data.placement` offers
(:func:`~analysis.data.placement.on_worker`). Split out of :mod:`analysis.driver.runner`,
which re-exports every name.
"""

from __future__ import annotations

import contextlib
from typing import Any

from analysis.data import placement

__all__ = ["WORKER_POLL", "WorkerTasks", "evaluate_kept"]

# Seconds between checks for dead workers while waiting for tasks pinned to workers.
WORKER_POLL = 1.0


def evaluate_kept(kept, proc, key: tuple, dataset: str) -> dict | None:
    """``proc.evaluate(dataset, columns)`` for a chunk the store ``kept`` holds (a
    worker's, or the driver's own cache), then what the pass kept with the columns
    counted in its budget (:meth:`ColumnCache.recount`); ``None`` if it does not hold it
    (a new process at the same address, or a dropped store): the driver then reads the
    chunk again."""
    if not kept.holds(key):
        return None
    out = proc.evaluate(dataset, kept.get(key))
    kept.recount(key)
    return out


class WorkerTasks:
    """Tasks pinned to dask workers (a mixin of :class:`analysis.driver.runner.Evaluator`,
    whose attributes it uses)."""

    def _alive_workers(self) -> set[str]:
        if self._client is None:
            return set()
        return set(self._client.scheduler_info(n_workers=-1)["workers"])

    def _submit(self, chunks: list, proc) -> list:
        """Each ``(index, item, key)`` of ``chunks`` sent to the dask worker that keeps its
        columns, as a task pinned there: ``[(index, item, key, address, future)]``.

        Only the processor and the key travel; the task evaluates the worker's own
        columns (:func:`evaluate_kept`)."""
        alive = self._alive_workers()
        token = self.cache.token
        out = []
        for i, item, key in chunks:
            address = self.cache.where(key)
            if address not in alive:  # that worker is gone: a task pinned to it never runs
                out.append((i, item, key, address, None))
                continue
            future = placement.on_worker(self._client, address, evaluate_kept, token,
                                         proc, key, item.dataset)
            out.append((i, item, key, address, future))
        return out

    def _rebalance(self) -> None:
        """Even out the number of chunks the live workers keep (at most one apart).

        A first pass leaves each chunk on the worker that happened to read it, often
        unevenly (6 and 4 of 10), and later passes run each chunk where it is kept, so
        the busiest worker sets their time. Chunks move from the worker with the most
        to the one with the fewest, worker to worker (a task on the first hands the
        columns to a task on the second; the scheduler sees only the tasks). A move
        that fails leaves the chunk to be read again."""
        alive = self._alive_workers()
        held: dict[str, list] = {a: [] for a in alive}
        for key, address in self.cache.remote.items():
            if address in held:
                held[address].append(key)
        moves = []
        while held:
            src = max(held, key=lambda a: len(held[a]))
            dst = min(held, key=lambda a: len(held[a]))
            if len(held[src]) - len(held[dst]) <= 1:
                break
            key = held[src].pop()
            held[dst].append(key)
            moves.append((key, src, dst))
        if not moves:
            return
        token, budget = self.cache.token, self.cache.budget
        pending = []
        for i, (key, src, dst) in enumerate(moves):
            taken = placement.on_worker(self._client, src, placement.take, token, key)
            done = placement.on_worker(self._client, dst, placement.adopt, token, key, taken,
                                       budget=budget)
            pending.append((i, key, key, (src, dst), done))
        try:
            moved, _ = self._gather(pending)  # a lost move: forgotten, read again
        except Exception:  # a move that raised: those chunks are read again, not fatal
            moved = {}
            for key, _, _ in moves:
                self.cache.forget(key)
        finally:
            for *_, future in pending:
                future.cancel()
        for i in moved:
            key, _, dst = moves[i]
            self.cache.place(key, dst)

    def _gather(self, pending: list) -> tuple[dict[int, Any], list]:
        """Outputs of the tasks :meth:`_submit` sent, ``{index: output}``, and the work
        items to read again: those whose worker died (or restarted without them).

        Polls: a task pinned to a dead worker would wait forever for it, so every
        :data:`WORKER_POLL` seconds the tasks of workers the scheduler no longer knows
        are cancelled and their chunks forgotten by the cache (``address`` may be a
        tuple: the task needs all of those workers)."""
        if not pending:  # nothing sent (iterative, futures): no dask import (~0.6 s)
            return {}, []
        from distributed import KilledWorker, wait

        results: dict[int, Any] = {}
        lost: list = []
        waiting = {}
        for i, item, key, address, future in pending:
            if future is None:
                self.cache.forget(key)
                lost.append((i, item))
            else:
                waiting[i] = (item, key, address, future)
        while waiting:
            with contextlib.suppress(TimeoutError):
                wait(
                    [w[3] for w in waiting.values()],
                    timeout=WORKER_POLL,
                    return_when="FIRST_COMPLETED",
                )
            for i, (item, key, _, future) in list(waiting.items()):
                if not future.done():
                    continue
                del waiting[i]
                try:
                    value = future.result()
                except KilledWorker:  # its worker died while running it: read it again
                    value = None
                if value is None:
                    self.cache.forget(key)
                    lost.append((i, item))
                else:
                    results[i] = value
            if waiting:
                alive = self._alive_workers()
                for i, (item, key, address, future) in list(waiting.items()):
                    needed = address if isinstance(address, tuple) else (address,)
                    if not set(needed) <= alive:
                        future.cancel()
                        del waiting[i]
                        self.cache.forget(key)
                        lost.append((i, item))
        return results, [item for _, item in sorted(lost, key=lambda x: x[0])]
