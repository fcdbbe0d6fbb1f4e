"""Cut kinds: how one cut turns a value into a pass probability (pure JAX).

A cut of the config (``{var, op, ...}``, on an object field or a per-event branch) is
chosen by its ``op`` among the registered kinds, :data:`KINDS`. A kind is one class in
one file of this package with

- ``ops``: the ``op`` values that select it (``">"``, ``"window"``);
- ``bounds``: the names of its thresholds. ``""`` is written ``value:`` (a constant)
  or ``param:`` (a parameter); any other name ``b`` is written ``b:`` or ``b_param:``
  (the window's ``lo``/``lo_param``, ``hi``/``hi_param``);
- ``probability(x, bounds, width, *, op)``: the soft pass probability of values ``x``
  (float64, any shape) for the threshold values ``bounds`` (one per name, traced),
  the exact hard cut at ``width == 0`` with zero gradient there;
- ``check(op, values)``: ``None``, or a one-line message for constant thresholds that
  can never pass (the window's ``lo >= hi``), reported by the config loader;
- optionally ``sides(op)``: where ``probability`` is the product over the bounds of the
  one-sided cuts :func:`analysis.select.objects.soft_pass` ``(x, bound, width, greater,
  inclusive)``, their ``(greater, inclusive)`` per bound (the threshold: one; the
  window: ``x > lo`` and ``x < hi``). The numba kernel computes such a cut as those
  threshold cuts; a kind without ``sides`` runs in the JAX kernel.

Every soft state is the expectation of the hard-cut state with each object passing
each cut independently with its ``probability``, so a kind needs nothing else: the
loader, the plan and the kernels know kinds only through this registry. Adding a
kind is one file and one entry in :data:`KINDS` (README "Extending").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from analysis.select.cuts.threshold import Threshold
from analysis.select.cuts.window import Window

__all__ = ["KINDS", "OPS", "CutKind", "kind_of", "probability"]


class CutKind(Protocol):
    """The protocol of a cut kind (module docstring)."""

    ops: tuple[str, ...]
    bounds: tuple[str, ...]

    def probability(self, x: Any, bounds: Sequence[Any], width: Any, *, op: str) -> Any: ...

    def check(self, op: str, values: Sequence[float | None]) -> str | None: ...

    # optional: def sides(self, op: str) -> tuple[tuple[bool, bool], ...] (module docstring)


# The one registration of cut kinds.
KINDS: tuple[CutKind, ...] = (
    Threshold(),
    Window(),
)
OPS: tuple[str, ...] = tuple(op for kind in KINDS for op in kind.ops)


def kind_of(op: str) -> CutKind:
    """The kind registered for ``op``; ``KeyError`` naming the known ops otherwise."""
    for kind in KINDS:
        if op in kind.ops:
            return kind
    raise KeyError(f"unknown cut op {op!r}; expected one of {', '.join(OPS)}")


def probability(op: str, x: Any, bounds: Sequence[Any], width: Any) -> Any:
    """Pass probability of values ``x`` under the cut ``op`` with thresholds ``bounds``."""
    return kind_of(op).probability(x, bounds, width, op=op)
