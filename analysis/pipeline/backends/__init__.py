"""The backends that compute a chunk's states: ``jax`` (the reference, any device JAX
sees) and ``numba`` (CPU kernels). :mod:`analysis.pipeline.backend` chooses."""
