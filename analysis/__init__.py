"""diffcoffea: differentiable statistics and selections for coffea analyses.

Float64 policy: importing this package enables JAX's 64-bit mode globally
(``jax_enable_x64``), and sets ``JAX_ENABLE_X64=1`` in the environment (if unset) so
that coffea futures/dask worker processes started afterwards inherit it. NanoAOD
inputs are float32; they are upcast so that every accumulation is float64, and all
results are float64.
"""

from __future__ import annotations

import os

# Before importing jax, so that this process and any child process agree.
os.environ.setdefault("JAX_ENABLE_X64", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
