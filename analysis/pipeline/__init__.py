"""From a config to per-chunk states: the plan, the column layout, the kernels (JAX
reference and numba fast path) and the states they return. Knows no files or executors."""

from pathlib import Path as _Path

from analysis.pipeline import _numba_cache

# Before any kernel module is imported: numba's cache of a function that calls into a
# changed module would otherwise stay in use (see _numba_cache).
_numba_cache.drop_stale(_Path(__file__).resolve().parent)
