"""The threshold cut ``x > t``, ``x >= t``, ``x < t``, ``x <= t`` (one sigmoid).

``P = sigmoid((x - t) / width)`` for ``>``/``>=`` and ``sigmoid((t - x) / width)``
for ``<``/``<=`` (:func:`analysis.select.objects.soft_pass`); at width 0 the hard
step, inclusive for ``>=``/``<=``. YAML: ``{var: pt, op: ">", value: 25}`` or
``param: jet_pt_min``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Threshold"]


class Threshold:
    """One threshold ``t`` (written ``value:`` or ``param:``)."""

    ops = (">", ">=", "<", "<=")
    bounds = ("",)

    def sides(self, op: str) -> tuple[tuple[bool, bool], ...]:
        """``((greater, inclusive),)``: one one-sided cut (the numba kernel's form)."""
        return ((op in (">", ">="), op in (">=", "<=")),)

    def probability(self, x: Any, bounds: Sequence[Any], width: Any, *, op: str) -> Any:
        # Here, not at import: the cut registry is read by the config checks (no JAX).
        from analysis.select.objects import soft_pass

        (t,) = bounds
        ((greater, inclusive),) = self.sides(op)
        return soft_pass(x, t, width, greater=greater, inclusive=inclusive)

    def check(self, op: str, values: Sequence[float | None]) -> str | None:
        return None
