"""The coffea executor a pass runs on: iterative, futures, dask (one ``Client``) or parsl
(one ``DataFlowKernel``).

:class:`Executors` is the executor half of :class:`analysis.driver.runner.Evaluator`
(which inherits it): it builds coffea's executor and ``Runner`` from the evaluator's
``executor_type``, ``workers``, ``chunksize``, ``status`` and ``config.executor``, keeps
the dask ``Client`` (and ``LocalCluster``) in ``_client`` / ``_cluster`` and the parsl
DataFlowKernel in ``_parsl`` for every pass, and runs coffea on a list of work items
(:meth:`Executors._call`). Parsl: coffea's ``ParslExecutor`` on a local
``HighThroughputExecutor`` with ``workers`` single-threaded workers (:func:`parsl_config`),
or the ``config`` of the file ``executor.parsl_config``; chunk results come back to the
driver, whose column cache serves later passes (as with futures).
:func:`worker_threads_env` gives the LocalCluster workers one compute thread each.
Split out of :mod:`analysis.driver.runner`, which re-exports every name.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from typing import Any

from analysis import runtime
from analysis.driver.files import EventSchema
from analysis.runtime.childenv import child_env

__all__ = [
    "DASK_CONNECT_TIMEOUT",
    "WORKER_THREADS_ENV",
    "Executors",
    "connect",
    "parsl_config",
    "parsl_run_dir",
    "worker_threads_env",
]

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


def with_bin_on_path(path: str) -> str:
    """``path`` (a ``PATH`` value) with this interpreter's ``bin`` folder first.

    Parameters
    ----------
    path : str
        A ``PATH`` value.

    Returns
    -------
    str
        ``path`` unchanged if it already names that folder, else with it in front.
    """
    here = os.path.dirname(sys.executable)
    parts = [p for p in path.split(os.pathsep) if p]
    if here in parts or not here:
        return path
    return os.pathsep.join([here, *parts])


def parsl_config(workers: int, *, run_dir: str | None = None) -> Any:
    """The default Parsl config: one local ``HighThroughputExecutor`` (label ``jobs``)
    of ``workers`` worker processes, one core and one compute thread each
    (:data:`WORKER_THREADS_ENV`), on the loopback interface, importing this process's
    ``analysis`` (its directory first on ``PYTHONPATH``)."""
    import shlex

    from parsl.config import Config
    from parsl.executors import HighThroughputExecutor
    from parsl.providers import LocalProvider


    # The workers import the same analysis (and processors) as this process, not
    # whatever an installed copy on their default path holds.
    env = child_env(worker_threads_env(os.environ))
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return Config(
        executors=[HighThroughputExecutor(
            label="jobs",
            address="127.0.0.1",
            max_workers_per_node=workers,
            cores_per_worker=1,
            provider=LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1,
                                   worker_init=f"export {exports}"),
        )],
        run_dir=run_dir or parsl_run_dir(),
        strategy="none",
        initialize_logging=False,
    )


def parsl_run_dir() -> str:
    """Parsl's run directory: ``$XDG_CACHE_HOME/diffcoffea/parsl`` (else
    ``~/.cache/diffcoffea/parsl``) if it can be created and written, else one under the
    system's temporary directory (an unwritable or missing HOME is no traceback)."""
    import tempfile

    base = runtime.settings().cache_home
    for where in (os.path.join(base, "diffcoffea", "parsl"),
                  os.path.join(tempfile.gettempdir(), f"diffcoffea-{os.getuid()}", "parsl")):
        try:
            os.makedirs(where, exist_ok=True)
        except OSError:
            continue
        if os.access(where, os.W_OK | os.X_OK):
            return where
    return tempfile.mkdtemp(prefix="diffcoffea-parsl-")


#: Largest ``executor.parsl_config`` file (a Python file of a few lines).
MAX_PARSL_CONFIG_BYTES = 1 << 20


def _user_parsl_config(path: str) -> Any:
    """``config`` of the Python file ``path`` (executor.parsl_config): a regular file of
    at most :data:`MAX_PARSL_CONFIG_BYTES` (a FIFO, ``/dev/zero`` or a directory, whose
    ``__main__.py`` runpy would run, refused in one line), run as Python: it runs code,
    as the config's author's (docs/guide/failures.md)."""
    import runpy

    from parsl.config import Config

    from analysis.errors import ConfigError
    from analysis.limits import regular_file

    if os.path.lexists(path):
        regular_file(path, "executor.parsl_config (a Python file)",
                     max_bytes=MAX_PARSL_CONFIG_BYTES)
    try:
        found = runpy.run_path(path).get("config")
    except FileNotFoundError:
        raise ConfigError(f"executor.parsl_config: no such file {path!r}") from None
    except Exception as err:
        raise ConfigError(f"executor.parsl_config: {path}: {type(err).__name__}: {err}") from None
    if not isinstance(found, Config):
        raise ConfigError(f"executor.parsl_config: {path}: expected a variable 'config' "
                          f"(a parsl.config.Config), found {type(found).__name__}")
    return found


class Executors:
    """Building and calling coffea's executors (a mixin of
    :class:`analysis.driver.runner.Evaluator`, whose attributes it uses)."""

    # -- executors ------------------------------------------------------------
    def _executor(self):
        from coffea import processor

        # before any worker starts: they inherit the cache directory (analysis.runtime)
        runtime.ensure_configured()
        retries = self.config.executor.retries
        if self.executor_type == "iterative":
            return processor.IterativeExecutor(status=self.status, retries=retries)
        if self.executor_type == "futures":
            return processor.FuturesExecutor(
                workers=self.workers, status=self.status, retries=retries
            )
        if self.executor_type == "parsl":
            return self._parsl_executor(retries)
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

    def _parsl_executor(self, retries: int):
        from coffea import processor

        if self._parsl is None:
            import parsl

            # Workers must compute in float64 too: they inherit JAX_ENABLE_X64 from here.
            os.environ["JAX_ENABLE_X64"] = "1"
            # Parsl launches its interchange and worker pool as commands found on PATH
            # (interchange.py, process_worker_pool.py: scripts in this environment's
            # bin); a venv used without activating it has them off the PATH.
            os.environ["PATH"] = with_bin_on_path(os.environ.get("PATH", ""))
            # Parsl's own helper processes are forked (they run no JAX): JAX's warning
            # about fork is for pools that compute, not for them.
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called",
                                    category=RuntimeWarning)
            path = self.config.executor.parsl_config
            cfg = (_user_parsl_config(self.config.resolve_path(path)) if path
                   else parsl_config(self.workers))
            self._parsl = parsl.load(cfg)
        return processor.ParslExecutor(status=self.status, retries=retries)

    def _close_parsl(self) -> None:
        if self._parsl is not None:
            import parsl

            with contextlib.suppress(Exception):
                self._parsl.cleanup()
            parsl.clear()
            self._parsl = None

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
        """coffea's runner on ``items``; the futures (and parsl) executor's printed
        traceback is held back.

        That executor prints a failing task's traceback to stderr before re-raising
        (the exception keeps it as its cause, shown with ``--debug``): it is written
        out only if the pass succeeds after all, so that an error stays one line.
        """
        if self.executor_type not in ("futures", "parsl"):
            return self._runner()(items, processor_instance=proc)
        held = io.StringIO()
        with contextlib.redirect_stderr(held):
            out = self._runner()(items, processor_instance=proc)
        sys.stderr.write(held.getvalue())
        return out
