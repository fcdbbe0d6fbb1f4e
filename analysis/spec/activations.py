"""The hidden-layer activations of :func:`analysis.stats.mlp.mlp`, by name.

Pure Python (no JAX), so that the config loader checks ``mlp.activation`` without
loading JAX; :data:`analysis.stats.mlp.ACTIVATIONS` maps each name to ``jax.nn.<name>``.
"""

from __future__ import annotations

__all__ = ["ACTIVATION_NAMES"]

# Each a function of jax.nn of the same name.
ACTIVATION_NAMES: tuple[str, ...] = ("tanh", "relu", "sigmoid", "gelu", "softplus")
