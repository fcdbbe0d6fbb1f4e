"""diffcoffea: differentiable statistics and selections for coffea analyses.

Float64 policy: importing this package enables JAX's 64-bit mode globally
(``jax_enable_x64``): it sets ``JAX_ENABLE_X64=1`` in the environment, which JAX reads
when it is imported (this package does not import JAX itself, so that the command line
starts at once) and which coffea futures/dask/parsl worker processes started afterwards
inherit; if JAX was imported before, the setting is applied to it directly. NanoAOD
inputs are float32; they are upcast so that every accumulation is float64, and all
results are float64.

Compilation cache: compiled kernels are kept on disk, in ``~/.cache/diffcoffea/jax``
(``$XDG_CACHE_HOME/diffcoffea/jax`` if set), so that a new process (the next
``diffcoffea evaluate``, a coffea worker) loads them instead of compiling again
(~1-2 s per kernel shape). ``DIFFCOFFEA_JAX_CACHE=<dir>`` chooses another directory,
``DIFFCOFFEA_JAX_CACHE=off`` disables it; a ``JAX_COMPILATION_CACHE_DIR`` set by the
user is left alone. The directory is passed to JAX and to worker processes through the
environment (``JAX_COMPILATION_CACHE_DIR`` and the cache thresholds), like x64.
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

__version__ = "0.0.0"
try:  # the installed distribution's version (pyproject.toml)
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("diffcoffea")
except (ImportError, PackageNotFoundError):  # a source checkout that is not installed
    pass


def _compilation_cache_dir() -> str | None:
    """Where compiled kernels are cached, or ``None`` if disabled (see module docstring)."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None  # the user's own JAX setting wins (JAX reads it itself)
    choice = os.environ.get("DIFFCOFFEA_JAX_CACHE", "")
    if choice.lower() in ("0", "off", "false", "no", "none"):
        return None
    if choice:
        return os.path.expanduser(choice)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "diffcoffea", "jax")


# Cache every kernel whose compilation is noticeable; the chunk kernels take 1-10 s,
# the small helpers (padding, merging) well under the threshold.
_CACHE_SETTINGS = {
    "jax_persistent_cache_min_compile_time_secs": 0.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}


def _enable_compilation_cache() -> None:
    path = _compilation_cache_dir()
    if path is None:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return  # read-only home, e.g. on a batch worker: compile as before
    os.environ["DIFFCOFFEA_JAX_CACHE"] = path  # worker processes use the same directory
    settings = {"jax_compilation_cache_dir": path, **_CACHE_SETTINGS}
    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "config"):
        for key, value in settings.items():
            jax.config.update(key, value)
        return
    # Read by JAX at its import (its flags default to the upper-case environment
    # variables), here and in every worker process, which inherits them.
    for key, value in settings.items():
        os.environ[key.upper()] = str(value)

if "jax" in sys.modules and hasattr(sys.modules["jax"], "config"):
    sys.modules["jax"].config.update("jax_enable_x64", True)
_enable_compilation_cache()
