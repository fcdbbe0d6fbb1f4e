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
  threshold cuts; a kind without ``sides`` runs in the JAX kernel;
- optionally, with ``sides``, ``edges(op, bounds)``: where the one-sided thresholds are
  not the bounds themselves but functions of them (a window ``c - d < x < c + d`` of
  bounds ``center``, ``half``: edges ``(c - d, c + d)``), those thresholds, one per
  side, as JAX-traceable functions of the bound values. :func:`edges_of` reads them
  (the bounds where a kind has no ``edges``), :func:`sided_probability` is the product
  of one-sided cuts at them (a kind's ``probability`` may simply return it). The numba
  backend computes each derived edge's value and chains its derivatives on the host
  (:mod:`analysis.pipeline.backends.numba.cutedges`).

Every soft state is the expectation of the hard-cut state with each object passing
each cut independently with its ``probability``, so a kind needs nothing else: the
loader, the plan and the kernels know kinds only through this registry. Adding a
kind is one file and one entry in :data:`KINDS` (README "Extending").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from analysis.select.cuts.around import Around
from analysis.select.cuts.threshold import Threshold
from analysis.select.cuts.window import Window

__all__ = ["KINDS", "OPS", "CutKind", "edges_of", "kind_of", "probability", "sided_probability"]


class CutKind(Protocol):
    """The protocol of a cut kind (module docstring)."""

    ops: tuple[str, ...]
    bounds: tuple[str, ...]

    def probability(self, x: Any, bounds: Sequence[Any], width: Any, *, op: str) -> Any: ...

    def check(self, op: str, values: Sequence[float | None]) -> str | None: ...

    # optional: def sides(self, op: str) -> tuple[tuple[bool, bool], ...] (module docstring)
    # optional, with sides: def edges(self, op: str, bounds: Sequence[Any]) -> tuple[Any, ...]


# The one registration of cut kinds.
KINDS: tuple[CutKind, ...] = (
    Threshold(),
    Window(),
    Around(),
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


def edges_of(kind: Any, op: str, bounds: Sequence[Any]) -> tuple[Any, ...]:
    """The one-sided thresholds of a kind with ``sides`` (module docstring), one per side.

    Parameters
    ----------
    kind
        A registered cut kind that declares ``sides``.
    op
        The cut's op.
    bounds
        The values of the kind's ``bounds`` (floats or traced).

    Returns
    -------
    tuple
        ``kind.edges(op, bounds)`` where the kind derives its edges, else ``bounds``.
    """
    edges = getattr(kind, "edges", None)
    return tuple(bounds) if edges is None else tuple(edges(op, bounds))


def sided_probability(kind: Any, x: Any, bounds: Sequence[Any], width: Any, *,
                      op: str) -> Any:
    """The product of the one-sided cuts of ``kind`` (its ``sides`` at :func:`edges_of`).

    Parameters
    ----------
    kind
        A cut kind that declares ``sides`` (and optionally ``edges``).
    x
        The values cut on (float64, any shape).
    bounds
        The kind's bound values (traced).
    width
        The cut's width (0: the hard cut).
    op
        Keyword-only. The cut's op.

    Returns
    -------
    Any
        ``prod_k soft_pass(x, edge_k, width, *sides(op)[k])``, the shape of ``x``.
    """
    from analysis.select.objects import soft_pass  # here: the registry loads no JAX

    sides = kind.sides(op)
    edges = edges_of(kind, op, bounds)
    if len(edges) != len(sides):
        raise ValueError(f"cut kind {op!r}: {len(edges)} edges but {len(sides)} sides")
    p = None
    for t, (greater, inclusive) in zip(edges, sides, strict=True):
        s = soft_pass(x, t, width, greater=greater, inclusive=inclusive)
        p = s if p is None else p * s
    return p
