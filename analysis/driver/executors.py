"""The coffea executor a pass runs on: iterative, futures or dask (one ``Client``).

:class:`Executors` is the executor half of :class:`analysis.driver.runner.Evaluator`
(which inherits it): it builds coffea's executor and ``Runner`` from the evaluator's
``executor_type``, ``workers``, ``chunksize``, ``status`` and ``config.executor``, keeps
the dask ``Client`` (and ``LocalCluster``) in ``_client`` / ``_cluster`` for every pass,
and runs coffea on a list of work items (:meth:`Executors._call`).
:func:`worker_threads_env` gives the LocalCluster workers one compute thread each.
Split out of :mod:`analysis.driver.runner`, which re-exports every name.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import Any

from analysis.driver.files import EventSchema

__all__ = ["DASK_CONNECT_TIMEOUT", "WORKER_THREADS_ENV", "Executors", "connect",
           "worker_threads_env"]

# How long a pass may wait to connect to a dask scheduler (never a hang on a dead address).
DASK_CONNECT_TIMEOUT = "30s"

# One compute thread per LocalCluster worker: each worker's XLA (and numba, BLAS) would
# otherwise start a pool as large as the machine, and the workers' pools would compete
# (on 2 cores, 2 workers were slower than 1: 0.83x; with one thread each, 1.09x at a
# load of 3 from other jobs, and 1.9x in CPU time). Variables the user set are kept.
WORKER_THREADS_ENV = {
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "NUMBA_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}


def worker_threads_env(environ: Any) -> dict[str, str]:
    """The variables of :data:`WORKER_THREADS_ENV` not already set in ``environ``."""
    return {k: v for k, v in WORKER_THREADS_ENV.items() if k not in environ}



def _seconds(timeout: str | float) -> float:
    from dask.utils import parse_timedelta

    return float(parse_timedelta(timeout, default="s"))


def connect(address: str, where: str, *, timeout: str | float = DASK_CONNECT_TIMEOUT) -> Any:
    """A dask ``Client`` of the scheduler at ``address``, or one
    :class:`~analysis.errors.InputError` line naming ``where`` (``executor.address``).

    One deadline, ``timeout``, covers the whole connection, the handshake included:
    distributed's own ``timeout`` bounds the TCP connect, but a server that accepts
    and never speaks dask (an HTTP server, a stuck process) would hold the handshake
    for ever, so the client is made in a daemon thread that is given up on."""
    import threading

    from dask.distributed import Client

    from analysis.errors import InputError, first_line

    limit = _seconds(timeout)
    box: dict[str, Any] = {}

    def attempt() -> None:
        try:
            box["client"] = Client(address, timeout=limit)
        except BaseException as err:  # noqa: BLE001  (reported on the caller's thread)
            box["error"] = err

    thread = threading.Thread(target=attempt, name="dask-connect", daemon=True)
    thread.start()
    thread.join(limit + 1.0)
    if thread.is_alive():
        raise InputError(f"{where}: {address}: no dask scheduler answered within {limit:g} s")
    if "error" in box:
        raise InputError(f"{where}: {address}: cannot connect to a dask scheduler "
                         f"({first_line(box['error'])})")
    return box["client"]


class Executors:
    """Building and calling coffea's executors (a mixin of
    :class:`analysis.driver.runner.Evaluator`, whose attributes it uses)."""

    # -- executors ------------------------------------------------------------
    def _executor(self):
        from coffea import processor

        retries = self.config.executor.retries
        if self.executor_type == "iterative":
            return processor.IterativeExecutor(status=self.status, retries=retries)
        if self.executor_type == "futures":
            return processor.FuturesExecutor(
                workers=self.workers, status=self.status, retries=retries
            )
        if self._client is None:
            # Workers must compute in float64 too: they inherit JAX_ENABLE_X64 from here.
            os.environ["JAX_ENABLE_X64"] = "1"
            from dask.distributed import Client, LocalCluster

            address = self.config.executor.address
            if address:
                self._client = connect(address, f"{self.config.source}: executor.address",
                                       timeout=DASK_CONNECT_TIMEOUT)
            else:
                self._cluster = LocalCluster(
                    n_workers=self.workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    env=worker_threads_env(os.environ),
                )
                self._client = Client(self._cluster)
        return processor.DaskExecutor(client=self._client, status=self.status, retries=retries)

    def _runner(self):
        import coffea.util
        from coffea import processor

        # coffea draws its progress bars whatever the executor's ``status`` says.
        coffea.util.coffea_console.quiet = not self.status

        return processor.Runner(
            executor=self._executor(),
            chunksize=self.chunksize,
            schema=EventSchema,
            savemetrics=False,
        )

    def _call(self, items: list, proc) -> Any:
        """coffea's runner on ``items``; the futures executor's printed traceback is held back.

        That executor prints a failing task's traceback to stderr before re-raising
        (the exception keeps it as its cause, shown with ``--debug``): it is written
        out only if the pass succeeds after all, so that an error stays one line.
        """
        if self.executor_type != "futures":
            return self._runner()(items, processor_instance=proc)
        held = io.StringIO()
        with contextlib.redirect_stderr(held):
            out = self._runner()(items, processor_instance=proc)
        sys.stderr.write(held.getvalue())
        return out
