"""The soft-bin oracle of issue 50, written as the issue states it (numpy only).

An entry at ``x`` lands in bin ``[e_k, e_k+1)`` with probability
``sigmoid((e_k+1 - x) / W) - sigmoid((e_k - x) / W)``; the flow bins take the rest.
"""

from __future__ import annotations

import numpy as np

__all__ = ["soft_bins"]


def _sig(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def soft_bins(edges, x, width: float) -> np.ndarray:
    """``x.shape + (nbins + 2,)``: each entry's probability of every bin, underflow first
    and overflow last (``width > 0``)."""
    e = np.asarray(edges, dtype=np.float64)
    c = _sig((e - np.asarray(x, dtype=np.float64)[..., None]) / width)  # P(x + eps < e_k)
    zero, one = np.zeros(c.shape[:-1] + (1,)), np.ones(c.shape[:-1] + (1,))
    return np.diff(np.concatenate([zero, c, one], axis=-1), axis=-1)
