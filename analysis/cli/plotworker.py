"""Plots drawn in worker processes while the command goes on (``optimize``'s PNGs).

Drawing a figure is matplotlib's layout and rendering, pure Python on one core, and
importing matplotlib, mplhep and the CMS style costs about as much as one figure (~0.7 s
of CPU). A :class:`PlotWorkers` starts one process (``python -c``, not a fork: the
parent may hold JAX's threads) when the command starts, before JAX loads, so that its
imports run beside the parent's; once they are done it forks the other workers (it
holds no threads; the imports are paid once, not once a worker: the core they would
take is the one the command's own imports and first steps run beside). Each worker has
a pipe for its jobs and one for its replies; the started one ends (and reaps) those it
forked. A figure is then a job: a function of
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


class _Channel:
    """A worker's pipes: jobs written to ``stdin``, replies read from ``stdout``; ``proc``
    the process started for it (None for the workers it forked)."""

    def __init__(self, stdin: Any, stdout: Any, proc: subprocess.Popen | None = None) -> None:
        self.stdin, self.stdout, self.proc = stdin, stdout, proc


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
        self._procs: list[_Channel] = []  # one a worker, the started one first
        self._queued: list[float] = []
        self._jobs: list[tuple[int, int]] = []  # (worker, its job number), in order
        self._local: list[Any] = []
        n = max(0, int(workers))
        if not n:
            return
        # the forked workers' pipes: (their jobs' read end, our write end), (our read
        # end of their replies, their write end); only their ends go to the process
        extra = [(os.pipe(), os.pipe()) for _ in range(n - 1)]
        theirs = [fd for (jobs, _), (_, replies) in extra for fd in (jobs, replies)]
        spec = ";".join(f"{jobs},{replies}" for (jobs, _), (_, replies) in extra)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c",
                 f"from analysis.cli.plotworker import serve; serve({spec!r})"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env(),
                pass_fds=theirs, start_new_session=True)  # the workers import this package
        except OSError:  # the jobs run here
            proc = None
        for fd in theirs:
            os.close(fd)
        if proc is None:
            for (_, ours), (back, _) in extra:
                os.close(ours)
                os.close(back)
            return
        self._procs.append(_Channel(proc.stdin, proc.stdout, proc))
        for (_, ours), (back, _) in extra:
            self._procs.append(_Channel(os.fdopen(ours, "wb"), os.fdopen(back, "rb")))
        self._queued = [0.0] * len(self._procs)

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
        for k, channel in enumerate(self._procs):
            n = sum(1 for w, _ in self._jobs if w == k)
            replies[k] = [_read(channel) for _ in range(n)]
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
        """End the workers: their job pipes closed (they exit; the started one once the
        ones it forked have), or killed: the started one terminated, which kills and
        reaps those it forked (an orphan is never reaped where the machine's first
        process does not), their whole session killed where it does not end at once."""
        proc = self._procs[0].proc if self._procs else None
        if kill and proc is not None:
            proc.terminate()
        for channel in self._procs:
            try:
                channel.stdin.close()
            except OSError:  # a job not read by a worker that died
                pass
        if proc is not None:
            try:
                proc.wait(timeout=5 if kill else 30)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:  # already gone
                    proc.kill()
                proc.wait()
        for channel in self._procs:
            channel.stdout.close()
        self._procs = []


def _read(channel: _Channel) -> tuple[bool, Any]:
    head = channel.stdout.read(8)
    if len(head) < 8:
        status = "" if channel.proc is None else f" with status {channel.proc.wait()}"
        return False, RuntimeError(f"a plot worker exited{status} before its plots were "
                                   "drawn")
    return pickle.loads(channel.stdout.read(int.from_bytes(head, "little")))


def _reply(out, ok: bool, value: Any) -> None:
    try:
        data = pickle.dumps((ok, value), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an unpicklable value or error: its one line
        data = pickle.dumps((False, (DiffcoffeaError if isinstance(value, DiffcoffeaError)
                                     else RuntimeError)(str(value))))
    out.write(len(data).to_bytes(8, "little") + data)
    out.flush()


def serve(forked: str = "") -> None:
    """The started worker: the imports, then a worker forked for each ``"jobs,replies"``
    pair of pipe descriptors in ``forked`` (``;``-separated), then its own loop
    (:func:`_serve`) on stdin and stdout. What the plotting prints goes to stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent ends us
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the replies
    sys.stdout = sys.stderr
    from analysis.cli.figures import _pyplot

    _pyplot()  # matplotlib, mplhep and the style while the parent starts
    pairs = [tuple(int(fd) for fd in p.split(",")) for p in forked.split(";") if p]
    children: list[int] = []
    me = os.getpid()

    def terminated(signum, frame) -> None:  # the parent ends us: those we forked too
        if os.getpid() == me:
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except OSError:  # already gone
                    pass
        os._exit(1)

    signal.signal(signal.SIGTERM, terminated)
    sys.stderr.flush()  # nothing buffered is written twice
    for k, (jobs, replies) in enumerate(pairs):
        try:
            pid = os.fork()
        except OSError:  # its pipes closed below: the parent draws its jobs
            break
        if pid == 0:  # a worker with the imports done: its own pipes only
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            out.close()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            for j, fds in enumerate(pairs):
                if j != k:
                    for fd in fds:
                        os.close(fd)
            _serve(os.fdopen(jobs, "rb"), os.fdopen(replies, "wb"), [])
        children.append(pid)
    for fds in pairs:
        for fd in fds:
            os.close(fd)
    _serve(sys.stdin.buffer, out, children)


def _serve(jobs, out, children: list[int]) -> None:
    """A worker's loop: jobs from ``jobs``, replies ``(ok, value or error)`` on ``out``,
    until ``jobs`` closes; then, ``children`` (the workers it forked) waited for, exit."""
    while True:
        head = jobs.read(8)
        if len(head) < 8:  # the parent is done: every figure was written (and synced)
            out.close()
            sys.stderr.flush()
            for pid in children:  # (they exit as their pipes close: at the same time)
                os.waitpid(pid, 0)
            os._exit(0)  # skips the interpreter's teardown (~0.15 s the parent waits for)
        name, args, kwargs = pickle.loads(jobs.read(int.from_bytes(head, "little")))
        try:
            value = _resolve(name)(*args, **kwargs)
        except Exception as err:
            _reply(out, False, err)
        else:
            _reply(out, True, value)
