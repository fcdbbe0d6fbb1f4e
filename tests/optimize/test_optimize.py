"""The optimisation loop: bounds, annealing, convergence, stochastic mode, Newton."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.driver.runner import Evaluator
from analysis.optimize.loop import Optimization
from analysis.optimize.objectives import Objective, objective_from_states
from tests import opt_helpers as H


def _run(small_data: Path, outdir: Path, **sections) -> Optimization:
    """Run an optimisation to the end (in process); returns it for inspection."""
    cfg = H.make_config(small_data, **sections)
    run = Optimization(cfg, Evaluator(cfg), outdir)
    while not run.done:
        run.do_step()
    return run


def _in_bounds(params: dict[str, float]) -> None:
    for name, value in params.items():
        lo, hi = H.PARAMETERS[name]["bounds"]
        assert np.isfinite(value) and lo <= value <= hi, f"{name} = {value} outside [{lo}, {hi}]"


@pytest.mark.parametrize(
    "optimizer",
    [
        {"name": "adam", "learning_rate": 50.0, "steps": 4},
        {"name": "sgd", "learning_rate": 1e4, "steps": 4, "kwargs": {"momentum": 0.9}},
    ],
    ids=["adam", "sgd"],
)
def test_bounds_hold_at_every_step_with_a_huge_learning_rate(small_data, tmp_path, optimizer):
    run = _run(small_data, tmp_path, optimizer=optimizer)
    assert len(run.history) == optimizer["steps"]
    at_bound = 0
    for entry in run.history:
        _in_bounds(entry["parameters"])
        at_bound += sum(
            value in H.PARAMETERS[name]["bounds"] for name, value in entry["parameters"].items()
        )
    _in_bounds(run.params())
    # The steps really were huge: the projection had to act.
    assert at_bound >= len(H.NAMES)


@pytest.mark.parametrize("schedule", ["exponential", "linear"])
def test_annealing_reaches_the_final_width(small_data, tmp_path, schedule):
    steps, factor = 5, 0.2
    run = _run(
        small_data,
        tmp_path,
        optimizer={
            "learning_rate": 0.01,
            "steps": steps,
            "anneal": {"final_width_factor": factor, "schedule": schedule},
        },
    )
    w0 = np.array(H.WIDTHS)
    widths = np.array([entry["widths"] for entry in run.history])
    assert len(widths) == steps
    np.testing.assert_allclose(widths[0], w0, rtol=1e-15)
    np.testing.assert_allclose(widths[-1], w0 * factor, rtol=1e-12)
    assert np.all(np.diff(widths, axis=0) < 0)
    # The shape of the schedule, in the middle: geometric or arithmetic mean of the ends.
    mid = widths[(steps - 1) // 2]
    expect = w0 * np.sqrt(factor) if schedule == "exponential" else w0 * (1 + factor) / 2
    np.testing.assert_allclose(mid, expect, rtol=1e-12)


def test_no_annealing_keeps_the_widths(small_data, tmp_path):
    run = _run(small_data, tmp_path, optimizer={"steps": 3, "anneal": {"schedule": "none"}})
    for entry in run.history:
        np.testing.assert_array_equal(entry["widths"], H.WIDTHS)


def _jet_pt_mean_at_start(small_data: Path, tmp_path: Path) -> float:
    """ttbar.jet_pt.mean where an optimisation starts (its parameters, its widths)."""
    cfg = H.make_config(
        small_data, objective={"terms": [{"type": "target", "stat": "ttbar.yield", "value": 0.0}]}
    )
    probe = Optimization(cfg, Evaluator(cfg), tmp_path / "probe")
    states = probe.ev.run(probe.params(), widths=probe.w0, order=1)
    from analysis.pipeline.results import dataset_report
    return dataset_report(states["ttbar"], probe.ev.plan)["observables"]["jet_pt"]["mean"]["value"]


def test_convergence_stops_early_on_a_flat_objective(small_data, tmp_path):
    """A target met at the start: zero gradient, constant objective, stop after ``window`` steps."""
    mean = _jet_pt_mean_at_start(small_data, tmp_path)
    window = 3
    run = _run(
        small_data,
        tmp_path / "run",
        objective={"terms": [{"type": "target", "stat": "ttbar.jet_pt.mean", "value": mean}]},
        optimizer={
            "steps": 40,
            "window": window,
            "tolerance": 1e-4,
            "anneal": {"schedule": "none"},
        },
    )
    assert run.converged
    assert run.step == window + 1
    assert run.history[-1]["objective"] == pytest.approx(0.0, abs=1e-12)


def test_no_early_stop_while_the_objective_moves(small_data, tmp_path):
    run = _run(
        small_data,
        tmp_path,
        objective={"terms": [{"type": "target", "stat": "ttbar.jet_pt.mean", "value": 200.0}]},
        optimizer={"steps": 6, "window": 2, "tolerance": 1e-6, "anneal": {"schedule": "none"}},
    )
    assert not run.converged
    assert run.step == 6


class _ChunkSpy:
    """Wraps ``Evaluator.run`` to record which chunks each pass used (``None``: all)."""

    def __init__(self, ev: Evaluator) -> None:
        self.calls: list[tuple | None] = []
        self._run = ev.run
        ev.run = self  # type: ignore[method-assign]

    def __call__(self, params=None, *, widths=None, order=1, chunks=None, **kw):
        self.calls.append(None if chunks is None else tuple(_key(c) for c in chunks))
        return self._run(params, widths=widths, order=order, chunks=chunks, **kw)


def _key(chunk) -> tuple:
    return (chunk.dataset, chunk.filename, chunk.entrystart, chunk.entrystop)


def _stochastic(small_data: Path, outdir: Path, seed: int, steps: int = 4):
    cfg = H.make_config(
        small_data,
        optimizer={"steps": steps, "stochastic": True, "chunks_per_step": 2, "seed": seed},
    )
    ev = Evaluator(cfg)
    spy = _ChunkSpy(ev)
    run = Optimization(cfg, ev, outdir)
    while not run.done:
        run.do_step()
    return run, spy, ev


def test_stochastic_mode_uses_a_reproducible_subset_of_chunks(small_data, tmp_path):
    run, spy, ev = _stochastic(small_data, tmp_path / "a", seed=7)
    every = {_key(c) for c in ev.chunks}
    assert len(every) == 8  # 2 datasets x 2 files x 2 chunks
    assert len(spy.calls) == 4
    for used in spy.calls:
        assert used is not None and len(used) == 2 and set(used) <= every
        # Every dataset in every step: without its chunks a dataset's yield would be 0.
        assert {key[0] for key in used} == {"ttbar", "dy"}
    assert len(set(spy.calls)) > 1, "every step drew the same chunks"

    # The history is that of the drawn chunks: re-evaluate step 1 on them alone.
    step = run.history[1]
    chunks = [c for c in ev.chunks if _key(c) in set(spy.calls[1])]
    states = spy._run(step["parameters"], widths=np.array(step["widths"]), chunks=chunks)
    redo = objective_from_states(Objective(run.config, ev.plan), states)
    assert redo["objective"] == pytest.approx(step["objective"], rel=1e-12)

    again, spy2, _ = _stochastic(small_data, tmp_path / "b", seed=7)
    assert spy2.calls == spy.calls
    assert H.comparable_history(again.history) == H.comparable_history(run.history)

    other, spy3, _ = _stochastic(small_data, tmp_path / "c", seed=8)
    assert spy3.calls != spy.calls


@pytest.mark.slow
def test_newton_improves_the_objective(small_data, tmp_path):
    """On a smooth objective (fixed widths; the integer min_jets not trained) Newton steps
    go downhill at every step and reach a stationary point within a few steps."""
    parameters = {**H.PARAMETERS, "min_jets": {**H.PARAMETERS["min_jets"], "trainable": False}}
    run = _run(
        small_data,
        tmp_path,
        parameters=parameters,
        optimizer={"method": "newton", "steps": 5, "anneal": {"schedule": "none"}},
    )
    objectives = np.array([entry["objective"] for entry in run.history])
    assert np.all(np.isfinite(objectives))
    assert np.all(np.diff(objectives) <= 1e-12 * np.abs(objectives[1:]))
    assert objectives[-1] < objectives[0] - 0.02 * abs(objectives[0])
    scale = np.array([hi - lo for lo, hi in (H.PARAMETERS[n]["bounds"] for n in run.coords.names)])
    grads = [np.array(list(e["gradient"].values())) * scale for e in run.history]
    assert np.linalg.norm(grads[-1]) < 1e-3 * np.linalg.norm(grads[0])
    for entry in run.history:
        _in_bounds(entry["parameters"])


def test_checkpoint_written_after_every_step(small_data, tmp_path):
    from analysis.optimize.checkpoint import CHECKPOINT, read_checkpoint
    cfg = H.make_config(small_data, optimizer={"steps": 3})
    run = Optimization(cfg, Evaluator(cfg), tmp_path)
    for k in range(1, 4):
        run.do_step()
        saved = read_checkpoint(tmp_path / CHECKPOINT)
        assert saved["step"] == k
        assert len(saved["history"]) == k
        np.testing.assert_array_equal(saved["u"], run.u)
    assert not list(tmp_path.glob("*.tmp"))
