"""The backend protocol: what every backend implements (optax-sized: three methods).

A backend computes a :class:`~analysis.pipeline.request.Request` for a plan:

- ``supports(plan, request) -> str | None``: ``None`` when it serves them, else the
  reason (one line; ``--debug`` logs it, ``backend: numba`` reports it as the error);
- ``prepare(plan, request) -> Prepared``: once per pass, what does not depend on a
  chunk's columns;
- ``run(prepared, columns, *, threads=None)``: one chunk's
  :class:`~analysis.pipeline.results.DatasetState` (``"entries"``: ``(x, w)``;
  ``"selected"``: ``(E,)`` weights; ``"replicas"``: the bootstrap's sums,
  :mod:`analysis.pipeline.replicas`), from its
  :class:`~analysis.pipeline.layout.ChunkColumns`. ``threads``: the CPU threads it may
  use (None: the cores); no result depends on it.

Backends live in :mod:`analysis.pipeline.backends` (one folder each) and never import
each other; :mod:`analysis.pipeline.backend` composes them (the only place that
chooses).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.request import Request

__all__ = ["Engine", "Prepared"]


@dataclass(frozen=True, eq=False)
class Prepared:
    """A plan and a request prepared by ``engine`` (its ``data``: what it prepared)."""

    engine: Engine
    plan: Plan
    request: Request
    data: Any = None

    def run(self, columns: ChunkColumns, *, threads: int | None = None) -> Any:
        """``engine.run(self, columns)``: one chunk's output."""
        return self.engine.run(self, columns, threads=threads)


class Engine(Protocol):
    """The protocol of a backend (module docstring)."""

    name: str

    def supports(self, plan: Plan, request: Request) -> str | None: ...

    def prepare(self, plan: Plan, request: Request) -> Prepared: ...

    def run(self, prepared: Prepared, columns: ChunkColumns, *,
            threads: int | None = None) -> Any: ...
