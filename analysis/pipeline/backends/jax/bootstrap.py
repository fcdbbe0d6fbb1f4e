"""The JAX backend's bootstrap counter (:class:`~analysis.pipeline.replicas.Counter`):
the ``(E, K)`` table of multiplicities (:func:`analysis.pipeline.split.poisson_replicas`)
times the weights, on the backend's device (float64)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from analysis.pipeline.split import poisson_replicas

__all__ = ["TableCounter"]


def _table(u: np.ndarray, count: int):
    return jnp.asarray(poisson_replicas(u, count), dtype=jnp.float64)


class TableCounter:
    """:class:`analysis.pipeline.replicas.Counter` by the table (module docstring)."""

    def selected(self, u: np.ndarray, s: np.ndarray, count: int) -> np.ndarray:
        s = jnp.asarray(s, dtype=jnp.float64)
        return np.asarray(_table(u, count).T @ jnp.stack([s, s * s], axis=1)).T

    def totals(self, u: np.ndarray, weights: np.ndarray, count: int) -> np.ndarray:
        p = _table(u, count)
        w = jnp.asarray(np.atleast_2d(weights), dtype=jnp.float64)
        return np.asarray(jnp.concatenate([p.sum(axis=0)[None], w @ p]))

    def lanes(self, u: np.ndarray, rows: np.ndarray, count: int,
              weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        p = _table(u, count)
        r = jnp.asarray(np.atleast_2d(rows), dtype=jnp.float64)
        sums = np.asarray(jnp.stack([r @ p, (r * r) @ p], axis=1))
        tot = None
        if weights is not None:
            w = jnp.asarray(np.atleast_2d(weights), dtype=jnp.float64)
            tot = np.asarray(jnp.concatenate([p.sum(axis=0)[None], w @ p]))
        return sums, tot
