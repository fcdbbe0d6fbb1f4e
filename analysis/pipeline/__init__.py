"""From a config to per-chunk states: the plan, the column layout, the backends (the
JAX reference in ``backends/jax``, the numba fast path in ``backends/numba``) and the
states they return. Knows no files or executors."""
