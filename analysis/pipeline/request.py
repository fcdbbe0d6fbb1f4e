"""What one pass computes: a :class:`Request` (values, derivatives, a pullback, yield
gradients, a grid, entries for plots, per-event selected weights, bootstrap replicas),
at which parameters.

A backend (:mod:`analysis.pipeline.engine`) is asked whether it serves a plan and a
request (``supports``), prepares them once per pass (``prepare``) and runs the prepared
pass on each chunk's columns (``run``). The request says *what*, never *how*: which
kernel or loop computes it is the chooser's business (:mod:`analysis.pipeline.backend`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["KINDS", "REPLICAS", "Replicas", "Request"]

#: what a pass computes, one of these (:attr:`Request.kind`)
KINDS = ("states", "grid", "pullback", "yield_gradients", "entries", "selected", "replicas")
#: what a bootstrap pass gives (:attr:`Replicas.what`)
REPLICAS = ("sums", "totals", "lanes")


@dataclass(frozen=True)
class Replicas:
    """A Poisson-bootstrap pass (:mod:`analysis.pipeline.replicas`).

    Parameters
    ----------
    what
        ``"sums"``: the values state and every replica's selected sums
        (:class:`~analysis.pipeline.replicas.ReplicaSums`); ``"totals"``: every replica's
        number of events and sum of weights per part of the validation split
        (:class:`~analysis.pipeline.replicas.ReplicaTotals`; no cut is read);
        ``"lanes"``: ``"sums"`` for each parameter point (the request's ``theta`` is
        ``(P, n_params)``) and part, with ``totals`` also the totals
        (:class:`~analysis.pipeline.replicas.ReplicaLanes`).
    count
        The number of replicas ``K`` (>= 0).
    fraction
        The validation split's fraction (``"totals"``, ``"lanes"``; None: no split).
    parts
        ``"lanes"``: the parts of the split, of :data:`analysis.pipeline.split.PARTS`.
    totals
        ``"lanes"``: also the totals.
    known
        ``"lanes"``: the ``(point, part)`` lanes whose state the caller has (from an
        earlier pass at the same point): their selected sums only, state None.
    """

    what: str
    count: int
    fraction: float | None = None
    parts: tuple[str, ...] = ("all",)
    totals: bool = False
    known: frozenset[tuple[int, str]] = frozenset()

    def __post_init__(self) -> None:
        if self.what not in REPLICAS:
            raise ValueError(f"replicas must be one of {', '.join(REPLICAS)}, got {self.what!r}")
        if self.count < 0:
            raise ValueError(f"the number of replicas must be >= 0, got {self.count}")


@dataclass(frozen=True, eq=False)
class Request:
    """One pass's request (frozen; see the module docstring).

    Parameters
    ----------
    theta
        The full parameter vector, float64 ``(n_params,)``; ``(G, n_params)`` with ``grid``.
    widths
        The cut widths, float64 (0: hard cut).
    order
        Keyword-only. Derivatives of the states with respect to the trainable
        parameters: 0 (values), 1 (Jacobians, default), 2 (and Hessians).
    pullback
        Keyword-only. Reverse mode's second pass: the payload of cotangents of the
        merged states (:func:`analysis.stats.pullback.pullback_payload`, one dataset's);
        each chunk returns its :class:`~analysis.stats.Pullback`.
    yield_rows
        Keyword-only. The values with the gradients of the selected yield and its sum of
        squared weights, ``(yield?, sumw2?)`` which rows to compute (a row left out is 0).
    grid
        Keyword-only. ``theta`` is ``G`` points: hard-cut states at each, no derivatives.
    entries
        Keyword-only. Observable ``entries``' values and soft weights per entry (for plots).
    selected
        Keyword-only. Each event's weight times its probability to pass the selection.
    replicas
        Keyword-only. A Poisson-bootstrap pass (:class:`Replicas`).

    Returns
    -------
    Request
        ``kind`` says which of them (at most one is asked; none: ``"states"``).
    """

    theta: Any
    widths: Any
    order: int = field(default=1, kw_only=True)
    pullback: list | None = field(default=None, kw_only=True)
    yield_rows: tuple[bool, bool] | None = field(default=None, kw_only=True)
    grid: bool = field(default=False, kw_only=True)
    entries: int | None = field(default=None, kw_only=True)
    selected: bool = field(default=False, kw_only=True)
    replicas: Replicas | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "theta", np.asarray(self.theta, dtype=np.float64))
        object.__setattr__(self, "widths", np.asarray(self.widths, dtype=np.float64))
        if self.order not in (0, 1, 2):
            raise ValueError(f"order must be 0, 1 or 2, got {self.order!r}")
        asked = [k for k, on in (("pullback", self.pullback is not None),
                                 ("yield_gradients", self.yield_rows is not None),
                                 ("grid", self.grid), ("entries", self.entries is not None),
                                 ("selected", self.selected),
                                 ("replicas", self.replicas is not None)) if on]
        if len(asked) > 1:
            raise ValueError(f"a request computes one thing, got {', '.join(asked)}")
        if asked and self.order != 0:
            raise ValueError(f"{asked[0]} are computed at order 0, got order {self.order}")

    @property
    def kind(self) -> str:
        """What the pass computes: one of :data:`KINDS`."""
        if self.pullback is not None:
            return "pullback"
        if self.yield_rows is not None:
            return "yield_gradients"
        if self.grid:
            return "grid"
        if self.entries is not None:
            return "entries"
        if self.selected:
            return "selected"
        if self.replicas is not None:
            return "replicas"
        return "states"
