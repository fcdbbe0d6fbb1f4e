"""The convergence criterion compares objectives at the same widths only.

With annealing, the widths change at every step up to ``A - 1`` (``A =
optimizer.anneal.steps``, default ``optimizer.steps``); a change of the objective
across a width change says nothing about the optimiser. The rule: ``|J_k -
J_{k-window}| <= tol |J_k|`` with both ``k`` and ``k - window`` >= ``A - 1``. The
histories are written by the test (no pass is run).
"""

from __future__ import annotations

import pytest

from analysis.driver.runner import Evaluator
from analysis.optimize.loop import Optimization, annealed_widths
from tests import opt_helpers as H


@pytest.fixture
def run(small_data, tmp_path):
    cfg = H.make_config(small_data, optimizer={
        "steps": 20, "window": 3, "tolerance": 1e-3, "anneal": {"steps": 8}})
    with Evaluator(cfg) as ev:
        yield Optimization(cfg, ev, tmp_path)


def _converged_after(run, n: int) -> bool:
    run.history = [{"step": k, "objective": -5.0, "parameters": run.params()} for k in range(n)]
    run.step = n
    return run._converged()


def test_widths_final_from_step_anneal_steps_minus_one(run):
    w0 = run.w0
    final = w0 * run.config.optimizer.anneal.final_width_factor
    assert run.anneal_steps == 8
    assert annealed_widths(w0, 6, run.config, steps=run.anneal_steps) == pytest.approx(
        w0 * 0.1 ** (6 / 7), rel=1e-12)
    for k in (7, 8, 19):
        assert annealed_widths(w0, k, run.config, steps=run.anneal_steps) == pytest.approx(
            final, rel=1e-12)


def test_constant_objective_converges_once_the_window_is_at_the_final_widths(run):
    # steps 0..k run; the window compares step k-1 and k-1-3; both >= 7 first at k = 11
    assert not _converged_after(run, 10)
    assert _converged_after(run, 11)


def test_default_schedule_cannot_converge_before_the_budget(small_data, tmp_path):
    """Annealing over the whole budget (the default): never converged within it; the
    status says why."""
    cfg = H.make_config(small_data, optimizer={"steps": 12, "window": 3, "tolerance": 1e-3})
    with Evaluator(cfg) as ev:
        r = Optimization(cfg, ev, tmp_path)
        assert not _converged_after(r, 12)
        r.converged = False
        st = r.status({"soft": {}, "hard": {}}, None)
    assert "annealing ends at step 11" in st["advice"]
    assert "optimizer.anneal.steps 12 of optimizer.steps 12" in st["advice"]
