"""Histogram bin edges as the config and :mod:`analysis.stats.histogram` accept them.

Pure Python and numpy (imported when edges are checked; no JAX), so that the config
loader checks edges without loading JAX; :func:`analysis.stats.histogram.check_edges` is this function.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check_edges"]


def check_edges(edges: Any, where: str = "stats.histogram: edges") -> tuple[float, ...]:
    """``edges`` as a tuple of floats, or ``ValueError`` (one line naming ``where``; ``""``:
    the caller names the key) unless they are at least two finite, strictly increasing
    numbers."""
    import numpy as np

    where = f"{where}: " if where else ""

    try:
        arr = np.asarray(edges, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}expected a list of numbers, found {edges!r}") from None
    if arr.ndim != 1 or arr.shape[0] < 2:
        raise ValueError(f"{where}expected at least two bin edges (a 1-D list), found {edges!r}")
    for i, v in enumerate(arr):
        if not math.isfinite(v):
            raise ValueError(f"{where}edges[{i}] = {v}: expected finite numbers")
    bad = np.flatnonzero(np.diff(arr) <= 0)
    if bad.size:
        i = int(bad[0]) + 1
        raise ValueError(
            f"{where}expected strictly increasing edges, found edges[{i}] = {arr[i]:g} "
            f"after edges[{i - 1}] = {arr[i - 1]:g}"
        )
    return tuple(float(v) for v in arr)
