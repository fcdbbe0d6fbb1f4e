"""The numba backend: the host (tables, pool, passes) in this folder, the compiled loops
in ``kernels/`` (which import only numpy, numba and math)."""

from pathlib import Path as _Path

from analysis.pipeline.backends.numba import _numba_cache

# Before any kernel module is imported: numba's cache of a function that calls into a
# changed module would otherwise stay in use (see _numba_cache).
_numba_cache.drop_stale(_Path(__file__).resolve().parent / "kernels")

# Every kernel's cache files checked before numba unpickles them (see _numba_cache).
from analysis.pipeline.backends.numba.kernels import _jit as _kernel_policy  # noqa: E402

if _numba_cache.install not in _kernel_policy.CACHE_HOOKS:
    _kernel_policy.CACHE_HOOKS.append(_numba_cache.install)
