"""From a config to per-chunk states: the plan, the column layout, the kernels (JAX
reference and numba fast path) and the states they return. Knows no files or executors."""
