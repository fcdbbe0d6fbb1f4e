"""The numba backend's bootstrap counter (:class:`~analysis.pipeline.replicas.Counter`):
every replica's sums in one loop over the events, without the ``(E, K)`` table
(:func:`analysis.pipeline.backends.numba.kernels._numba_replicas.replica_lanes`: the
selected sums are its lanes, the totals its weights' sums with no lanes)."""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._numba_replicas import replica_lanes
from analysis.pipeline.split import _POISSON1_CDF

__all__ = ["NumbaCounter"]


class NumbaCounter:
    """:class:`analysis.pipeline.replicas.Counter` by the numba loops."""

    def selected(self, u: np.ndarray, s: np.ndarray, count: int) -> np.ndarray:
        return replica_lanes(u, s, count, cdf=_POISSON1_CDF)[0][0]

    def totals(self, u: np.ndarray, weights: np.ndarray, count: int) -> np.ndarray:
        return replica_lanes(u, np.zeros((0, np.shape(u)[0])), count, weights,
                             cdf=_POISSON1_CDF)[1]

    def lanes(self, u: np.ndarray, rows: np.ndarray, count: int,
              weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        return replica_lanes(u, rows, count, weights, cdf=_POISSON1_CDF)
