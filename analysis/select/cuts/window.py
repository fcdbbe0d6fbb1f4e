"""The window cut ``lo < x < hi`` (two sigmoids).

``P = sigmoid((x - lo) / width) * sigmoid((hi - x) / width)``: the product of the two
one-sided cuts of :func:`analysis.select.objects.soft_pass` with one width; at width 0
the hard ``lo < x < hi`` (both ends exclusive) with zero gradient. Either threshold may
be a constant or a (trainable) parameter. YAML, on a per-event branch or an object
field::

    {var: MET.pt, op: window, lo: 20, hi: 80, width: 2}
    {var: pt, op: window, lo_param: pt_lo, hi_param: pt_hi, width: 5}

Constant thresholds with ``lo >= hi`` pass nothing: a config error. A parameter ``lo``
above ``hi`` gives probability ~0 (not an error: an optimiser may pass through it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Window"]


class Window:
    """Two thresholds ``lo`` and ``hi`` (``lo:``/``lo_param:``, ``hi:``/``hi_param:``)."""

    ops = ("window",)
    bounds = ("lo", "hi")

    def sides(self, op: str) -> tuple[tuple[bool, bool], ...]:
        """``x > lo`` and ``x < hi``: ``(greater, inclusive)`` per bound."""
        return ((True, False), (False, False))

    def probability(self, x: Any, bounds: Sequence[Any], width: Any, *, op: str) -> Any:
        from analysis.select.objects import soft_pass  # here: the registry loads no JAX

        (lo, hi), ((g_lo, i_lo), (g_hi, i_hi)) = bounds, self.sides(op)
        above = soft_pass(x, lo, width, greater=g_lo, inclusive=i_lo)
        return above * soft_pass(x, hi, width, greater=g_hi, inclusive=i_hi)

    def check(self, op: str, values: Sequence[float | None]) -> str | None:
        lo, hi = values
        if lo is not None and hi is not None and not lo < hi:
            return f"window needs lo < hi, got lo {lo:g} and hi {hi:g}"
        return None
