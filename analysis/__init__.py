"""diffcoffea: differentiable statistics and selections for coffea analyses.

Float64 policy: importing this package enables JAX's 64-bit mode globally
(``jax_enable_x64``): it sets ``JAX_ENABLE_X64=1`` in the environment, which JAX reads
when it is imported (this package does not import JAX itself, so that the command line
starts at once) and which coffea futures/dask/parsl worker processes started afterwards
inherit; if JAX was imported before, the setting is applied to it directly. NanoAOD
inputs are float32; they are upcast so that every accumulation is float64, and all
results are float64.

The x64 setting is the one change to the process that importing any ``analysis``
module makes (the command line also installs its Ctrl-C handler when it starts).
Everything else waits: JAX's persistent compilation cache, the fork hooks and glibc's
malloc thresholds for :func:`analysis.runtime.configure` (which the command line, the
driver and every worker's first ``stats.derive`` call), the garbage collector's frozen
start-up objects for a compiled pass's first chunk, numba's stale cache files for
numba's first read of a kernel's cache (:mod:`analysis.runtime`).
``analysis.__version__``: the installed distribution's version.
"""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_at_startup(signum, frame):
    # Nothing to save yet; a KeyboardInterrupt inside jaxlib's initialisation would
    # give a traceback (or an ImportError) and a teardown of half-built XLA state.
    os.write(2, b"diffcoffea: interrupted\n")
    os._exit(130)


_argv = getattr(sys, "orig_argv", [])
if os.path.basename(sys.argv[0] if sys.argv else "") == "diffcoffea" or any(
    a == "-m" and b == "analysis" for a, b in zip(_argv, _argv[1:])
):
    # The command line: Ctrl-C during the imports exits 130 at once; analysis.cli.main
    # installs the KeyboardInterrupt handler again when it starts.
    signal.signal(signal.SIGINT, _interrupted_at_startup)

# JAX is not imported here (``diffcoffea --help`` and a refused config must answer at
# once): its settings go through the environment, which JAX reads when it is imported
# (this process) and which worker processes inherit. If JAX is already imported, they
# are applied to it directly.
os.environ["JAX_ENABLE_X64"] = "1"  # the float64 policy (module docstring)


def __getattr__(name: str):
    # ``__version__`` is looked up when asked for: importlib.metadata costs ~50 ms of
    # every command's start-up otherwise (a refused config answers at once).
    if name == "__version__":
        try:  # the installed distribution's version (pyproject.toml)
            from importlib.metadata import PackageNotFoundError, version

            try:
                return version("diffcoffea")
            except PackageNotFoundError:  # a source checkout that is not installed
                return "0.0.0"
        except ImportError:
            return "0.0.0"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if "jax" in sys.modules and hasattr(sys.modules["jax"], "config"):
    sys.modules["jax"].config.update("jax_enable_x64", True)
