"""A new backend is a class implementing the protocol (analysis.pipeline.engine) plus its
registration (analysis.pipeline.backend.ENGINES, ORDER): the chooser then runs it for
the passes it supports and the next backend for the rest (docs/extending/index.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analysis.config.loader import load_config
from analysis.driver.runner import Evaluator
from analysis.pipeline import backend
from analysis.pipeline.backends.jax.backend import JaxBackend
from analysis.pipeline.engine import Prepared

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RAN: list[int] = []  # the chunks the new backend ran (its copies in coffea's hands too)


@dataclass(frozen=True)
class ValuesOnJax:
    """A backend of values only (the JAX passes underneath), counting its chunks."""

    name: str = "values"

    def supports(self, plan, request):
        return None if request.kind == "states" and request.order == 0 else "values only"

    def prepare(self, plan, request):
        return Prepared(self, plan, request)

    def run(self, prepared, columns, *, threads=None):
        RAN.append(columns.n_events)
        return JaxBackend().run(prepared, columns)


def test_a_registered_backend_runs_the_passes_it_supports(monkeypatch):
    RAN.clear()
    monkeypatch.setitem(backend.ENGINES, "values", lambda choice: ValuesOnJax())
    monkeypatch.setitem(backend.ORDER, "auto", ("values",) + backend.ORDER["auto"])
    config = load_config(CONFIGS / "ttbar.yaml")
    with Evaluator(config, chunksize=100, backend="auto") as ev:
        values = ev.run(order=0)
        assert RAN == [100, 100]  # its two chunks
        ev.run(order=1)  # not supported: the next backend (numba)
        assert RAN == [100, 100]
    monkeypatch.setitem(backend.ORDER, "auto", ("numba", "jax"))
    with Evaluator(config, chunksize=100, backend="auto") as ev:
        ref = ev.run(order=0)
    a, b = values["ttbar"].derived.value, ref["ttbar"].derived.value
    assert abs(float(a["selected_sumw"]) / float(b["selected_sumw"]) - 1) < 1e-12
