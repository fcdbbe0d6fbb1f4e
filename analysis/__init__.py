"""diffcoffea: differentiable statistics and selections for coffea analyses.

Float64 policy: importing this package enables JAX's 64-bit mode globally
(``jax_enable_x64``), and sets ``JAX_ENABLE_X64=1`` in the environment (if unset) so
that coffea futures/dask worker processes started afterwards inherit it. NanoAOD
inputs are float32; they are upcast so that every accumulation is float64, and all
results are float64.
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

# Before importing jax, so that this process and any child process agree.
os.environ.setdefault("JAX_ENABLE_X64", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
