"""The window about a centre, ``c - d < x < c + d`` (two sigmoids at derived edges).

``P = sigmoid((x - (c - d)) / width) * sigmoid((c + d - x) / width)``: the window cut
(:mod:`analysis.select.cuts.window`) with its thresholds derived from a centre ``c``
and a half-width ``d`` (``edges``), so that an optimiser moves the window's position
and its size as two parameters (a mass window about a peak: ``center_param`` trained,
``half`` fixed, or both). At width 0 the hard ``c - d < x < c + d`` with zero
gradient. YAML::

    {var: mass, op: around, center: 91.2, half_param: z_half, width: 2}

A constant ``half <= 0`` passes nothing: a config error. On the numba backend the two
edges are pseudo-parameters whose derivatives are chained on the host
(:mod:`analysis.pipeline.backends.numba.cutedges`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Around"]


class Around:
    """A centre ``c`` and a half-width ``d`` (``center:``/``center_param:``,
    ``half:``/``half_param:``)."""

    ops = ("around",)
    bounds = ("center", "half")

    def sides(self, op: str) -> tuple[tuple[bool, bool], ...]:
        """``x > c - d`` and ``x < c + d``: ``(greater, inclusive)`` per edge."""
        return ((True, False), (False, False))

    def edges(self, op: str, bounds: Sequence[Any]) -> tuple[Any, ...]:
        """The one-sided thresholds ``(c - d, c + d)`` of the bounds ``(c, d)`` (traced)."""
        c, d = bounds
        return (c - d, c + d)

    def probability(self, x: Any, bounds: Sequence[Any], width: Any, *, op: str) -> Any:
        from analysis.select.cuts import sided_probability  # here: a cycle at import

        return sided_probability(self, x, bounds, width, op=op)

    def check(self, op: str, values: Sequence[float | None]) -> str | None:
        _, d = values
        if d is not None and not d > 0:
            return f"around needs half > 0, got half {d:g}"
        return None
