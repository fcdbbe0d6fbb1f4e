"""YAML schema of a soft histogram: ``histograms: [{name, x, edges | bins, width,
trainable_edges}]`` (the contract of :mod:`analysis.config.likelihood`'s docstring).

* ``width`` (default 0): the soft bins' logistic scale ``W`` (:mod:`analysis.stats.softbins`:
  an entry at ``x`` lands in bin ``[e_k, e_k+1)`` with probability
  ``sigmoid((e_k+1 - x)/W) - sigmoid((e_k - x)/W)``); a cut width of the plan, annealed
  with the others; 0 is the hard histogram.
* ``trainable_edges`` (default false): the interior edges are the parameters
  ``NAME.edges[i]``, ``i = 1..n-1`` (:func:`edge_parameters`, after the scores'
  parameters), initialised at the configured edges; the outer edges stay fixed. The
  optimiser keeps them strictly increasing inside the outer edges
  (:mod:`analysis.optimize.edgecoords`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from analysis.config.schema import _fail, _Model
from analysis.select import exprs
from analysis.spec.edges import check_edges

__all__ = ["BinsConfig", "HistogramConfig", "edge_parameters", "is_edge_parameter"]


class BinsConfig(_Model):
    """``n`` equal bins from ``lo`` to ``hi``."""

    n: int = Field(ge=1, le=100000)
    lo: float
    hi: float

    @model_validator(mode="after")
    def _check(self) -> BinsConfig:
        if not self.lo < self.hi:
            raise _fail("hi", f"expected lo < hi, got lo = {self.lo:g}, hi = {self.hi:g}")
        return self


class HistogramConfig(_Model):
    """A soft histogram of the expression ``x`` with ``edges`` or ``bins``; ``width``:
    its soft bins' logistic scale (0: hard bins; annealed with the cut widths)."""

    name: str = Field(min_length=1)
    x: str
    edges: list[float] | None = None
    bins: BinsConfig | None = None
    width: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    trainable_edges: bool = False

    @field_validator("x")
    @classmethod
    def _expr(cls, v: str) -> str:
        exprs.parse(v)  # syntax (a ValueError names the problem); sets checked by Config
        return v

    @field_validator("edges")
    @classmethod
    def _edges(cls, v: list[float] | None) -> list[float] | None:
        if v is not None:
            check_edges(v, "")  # the line names the key
        return v

    @model_validator(mode="after")
    def _check(self) -> HistogramConfig:
        if (self.edges is None) == (self.bins is None):
            raise _fail("edges", "give exactly one of 'edges: [...]' or 'bins: {n, lo, hi}'")
        if self.trainable_edges and len(self.bin_edges()) < 3:
            raise _fail("trainable_edges", "one bin has no interior edge to train: give at "
                        "least two bins (the outer edges stay fixed)")
        return self

    def edge_names(self) -> list[str]:
        """The parameters of the interior edges, ``NAME.edges[i]``, ``i = 1..n-1``."""
        return [f"{self.name}.edges[{i}]" for i in range(1, len(self.bin_edges()) - 1)]

    def edges_at(self, params: Any = None) -> tuple[float, ...]:
        """The edges with trainable interior edges at ``params`` (a mapping; missing
        names, or ``trainable_edges: false``: the configured edges)."""
        e = list(self.bin_edges())
        if self.trainable_edges and params:
            for i, n in enumerate(self.edge_names(), start=1):
                e[i] = float(params.get(n, e[i]))
        return tuple(e)

    def bin_edges(self) -> tuple[float, ...]:
        """The edges as floats (``bins`` expanded: ``lo + i (hi - lo) / n``)."""
        if self.edges is not None:
            return tuple(float(e) for e in self.edges)
        b = self.bins
        assert b is not None
        return tuple(b.lo + i * (b.hi - b.lo) / b.n for i in range(b.n)) + (float(b.hi),)


def edge_parameters(config: Any) -> list[tuple[str, float, bool]]:
    """``[(name, init, True)]`` of the histograms' trainable interior edges
    (``trainable_edges: true``), histograms in order, edges left to right."""
    return [(n, e, True) for h in config.histograms if h.trainable_edges
            for n, e in zip(h.edge_names(), h.bin_edges()[1:-1])]


def is_edge_parameter(config: Any, name: str) -> bool:
    """True when ``name`` is a trainable edge ``NAME.edges[i]`` of ``config``."""
    return any(name in h.edge_names() for h in config.histograms if h.trainable_edges)
