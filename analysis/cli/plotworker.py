"""Plots drawn in worker processes while the command goes on (``optimize``'s PNGs).

Drawing a figure is matplotlib's layout and rendering, pure Python on one core, and
importing matplotlib, mplhep and the CMS style costs about as much as one figure. A
:class:`PlotWorkers` starts its processes (``python -c``, not a fork: the parent may
hold JAX's threads) when the command starts, before JAX loads, so that their imports
run beside the parent's; a figure is then a job: a function of
:mod:`analysis.cli.plots` or :mod:`analysis.cli.lkplots` and its arguments (plain data:
results.json's report, filled ``hist.Hist`` objects), pickled to a worker's stdin. The
workers draw with the same code and style as the parent would, so the PNGs are the
same bytes (``docs/explanation/performance.md``). :meth:`PlotWorkers.wait` collects every job's
paths; a job's error is raised there in the parent (a :class:`~analysis.errors.DiffcoffeaError`
as the same one line). Where a worker cannot start, the jobs run in the parent.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import subprocess
import sys
from typing import Any

from analysis.errors import DiffcoffeaError
from analysis.runtime.childenv import child_env

__all__ = ["PlotWorkers"]

#: the modules a job's function may come from
_MODULES = ("analysis.cli.plots", "analysis.cli.lkplots")


def _resolve(name: str):
    module, _, attr = name.rpartition(".")
    if module not in _MODULES:
        raise ValueError(f"plot job {name!r}: not a function of {', '.join(_MODULES)}")
    return getattr(importlib.import_module(module), attr)


class PlotWorkers:
    """``workers`` processes that draw plots (module docstring); a context manager.

    Parameters
    ----------
    workers : int
        How many processes (0: every job runs in the parent, when submitted).

    ``submit(name, *args, cost=1.0, **kwargs)`` queues ``name(*args, **kwargs)``
    (``name`` a function of :mod:`analysis.cli.plots` or :mod:`analysis.cli.lkplots`,
    e.g. ``"analysis.cli.plots.plot_history"``) on the worker with the least queued
    ``cost``; :meth:`wait` returns every job's return value, in submission order.
    """

    def __init__(self, workers: int = 2) -> None:
        self._procs: list[subprocess.Popen] = []
        self._queued: list[float] = []
        self._jobs: list[tuple[int, int]] = []  # (worker, its job number), in order
        self._local: list[Any] = []
        env = child_env()  # the workers import this analysis package
        for _ in range(max(0, int(workers))):
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-c", "from analysis.cli.plotworker import serve; serve()"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            except OSError:
                break  # the jobs run here
            self._procs.append(proc)
            self._queued.append(0.0)

    def __enter__(self) -> PlotWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self.close(kill=exc[0] is not None)

    def submit(self, name: str, *args: Any, cost: float = 1.0, **kwargs: Any) -> None:
        """Queue ``name(*args, **kwargs)`` (class docstring)."""
        if not self._procs:
            self._jobs.append((-1, len(self._local)))
            self._local.append(_resolve(name)(*args, **kwargs))
            return
        k = min(range(len(self._procs)), key=lambda i: self._queued[i])
        job = pickle.dumps((name, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        stdin = self._procs[k].stdin
        assert stdin is not None
        try:
            stdin.write(len(job).to_bytes(8, "little") + job)
            stdin.flush()
        except OSError:  # the worker is gone (killed, out of memory): drawn here
            self._jobs.append((-1, len(self._local)))
            self._local.append(_resolve(name)(*args, **kwargs))
            return
        self._queued[k] += cost
        self._jobs.append((k, sum(1 for w, _ in self._jobs if w == k)))

    def wait(self) -> list[Any]:
        """Every job's return value in submission order, once all are done; the first
        failed job's error raised (a worker that died: RuntimeError)."""
        replies: dict[int, list[Any]] = {}
        for k, proc in enumerate(self._procs):
            n = sum(1 for w, _ in self._jobs if w == k)
            replies[k] = [_read(proc) for _ in range(n)]
        jobs, local = self._jobs, self._local
        self._jobs, self._local = [], []  # every reply read: the workers take new jobs
        self._queued = [0.0] * len(self._procs)
        out = []
        for w, j in jobs:
            if w < 0:
                out.append(local[j])
                continue
            ok, value = replies[w][j]
            if not ok:
                raise value
            out.append(value)
        return out

    def close(self, *, kill: bool = False) -> None:
        """End the workers: their stdin closed (they exit), or killed."""
        for proc in self._procs:
            if kill:
                proc.kill()
            elif proc.stdin is not None:
                proc.stdin.close()
        for proc in self._procs:
            try:
                proc.wait(timeout=None if kill else 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()
        self._procs = []


def _read(proc: subprocess.Popen) -> tuple[bool, Any]:
    stdout = proc.stdout
    assert stdout is not None
    head = stdout.read(8)
    if len(head) < 8:
        code = proc.wait()
        return False, RuntimeError(f"a plot worker exited with status {code} before its "
                                   "plots were drawn")
    return pickle.loads(stdout.read(int.from_bytes(head, "little")))


def _reply(out, ok: bool, value: Any) -> None:
    try:
        data = pickle.dumps((ok, value), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an unpicklable value or error: its one line
        data = pickle.dumps((False, (DiffcoffeaError if isinstance(value, DiffcoffeaError)
                                     else RuntimeError)(str(value))))
    out.write(len(data).to_bytes(8, "little") + data)
    out.flush()


def serve() -> None:
    """A worker's loop: jobs from stdin, replies ``(ok, value or error)`` on stdout,
    until stdin closes. What the plotting prints goes to stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent ends us
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the replies
    sys.stdout = sys.stderr
    stdin = sys.stdin.buffer
    from analysis.cli.figures import _pyplot

    _pyplot()  # matplotlib, mplhep and the style while the parent starts
    while True:
        head = stdin.read(8)
        if len(head) < 8:  # the parent is done: every figure was written (and synced)
            out.close()
            sys.stderr.flush()
            os._exit(0)  # skips the interpreter's teardown (~0.15 s the parent waits for)
        name, args, kwargs = pickle.loads(stdin.read(int.from_bytes(head, "little")))
        try:
            value = _resolve(name)(*args, **kwargs)
        except Exception as err:
            _reply(out, False, err)
        else:
            _reply(out, True, value)
