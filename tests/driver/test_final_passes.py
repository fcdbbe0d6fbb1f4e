"""What an optimisation costs after its steps: the final soft evaluation reuses the last
step's states when the parameters did not move, the hard one needs values only, the
Hessian is computed only when asked for (checked against finite differences of the
gradient), and the plots' histograms are filled in one pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.cli.plots import histogram_range, plot_histograms
from analysis.driver.runner import Evaluator
from analysis.optimize.loop import Optimization
from analysis.optimize.objectives import Objective, objective_from_states
from tests import opt_helpers as H


class Passes:
    """Records ``ev.run`` calls (order, widths) and counts ``ev.process`` passes."""

    def __init__(self, ev: Evaluator, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs: list[tuple[int, list[float]]] = []
        self.passes = 0
        run, process = ev.run, ev.process

        def recording_run(params=None, *, widths=None, order=1, chunks=None, **kw):
            self.runs.append((order, None if widths is None else [float(w) for w in widths]))
            return run(params, widths=widths, order=order, chunks=chunks, **kw)

        def counting_process(*args, **kwargs):
            self.passes += 1
            return process(*args, **kwargs)

        monkeypatch.setattr(ev, "run", recording_run)
        monkeypatch.setattr(ev, "process", counting_process)


def _optimise(cfg, outdir: Path) -> Optimization:
    run = Optimization(cfg, Evaluator(cfg), outdir)
    while not run.done:
        run.do_step()
    return run


def test_final_reuses_the_last_step_and_skips_the_hessian(small_data, tmp_path, monkeypatch):
    # updates far below one ulp, no annealing: the final parameters and widths are the
    # last step's
    optimizer = {"name": "sgd", "learning_rate": 1e-300, "steps": 2, "anneal": {"schedule": "none"}}
    cfg = H.make_config(small_data, optimizer=optimizer)
    run = _optimise(cfg, tmp_path)
    calls = Passes(run.ev, monkeypatch)
    final = run.final()
    zeros = [0.0] * len(run.w0)
    assert calls.runs == [(0, zeros)]  # only the hard evaluation, values only
    assert run.final_passes == 1
    last = run.history[-1]
    soft = final["soft"]
    assert soft["objective"] == last["objective"] and soft["gradient"] == last["gradient"]
    assert "hessian" not in soft
    # the values-only hard evaluation equals a first-order one's value
    ref = objective_from_states(
        Objective(cfg, run.plan),
        run.ev.run(final["hard"]["parameters"], widths=np.zeros_like(run.w0), order=1),
    )
    np.testing.assert_allclose(final["hard"]["objective"], ref["objective"], rtol=1e-12)
    np.testing.assert_allclose(final["hard"]["significance"], ref["significance"], rtol=1e-12)


@pytest.mark.slow  # compiles the second-order kernel (~15 s on a loaded machine)
def test_hessian_when_asked_matches_finite_differences(small_data, tmp_path, monkeypatch):
    cfg = H.make_config(small_data, optimizer={"steps": 2}, output={"hessian": True})
    run = _optimise(cfg, tmp_path)
    calls = Passes(run.ev, monkeypatch)
    final = run.final()
    assert [order for order, _ in calls.runs] == [2, 0] and run.final_passes == 2
    soft = final["soft"]
    names = run.coords.names
    hess = np.array([[soft["hessian"][a][b] for b in names] for a in names])
    params, widths = soft["parameters"], np.asarray(soft["widths"])
    objective = Objective(cfg, run.plan)

    def grad(p):
        return objective_from_states(objective, run.ev.run(p, widths=widths))["grad"]

    fd = np.empty_like(hess)
    for i, name in enumerate(names):
        h = 1e-5 * run.coords.scale[i]  # small against every cut width
        up, down = dict(params), dict(params)
        up[name] += h
        down[name] -= h
        fd[i] = (grad(up) - grad(down)) / (2 * h)
    scale = np.max(np.abs(hess))
    assert scale > 0
    np.testing.assert_allclose(hess, fd, rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(hess, hess.T, rtol=1e-10, atol=1e-12 * scale)


def test_histograms_in_one_pass(small_data, tmp_path, monkeypatch):
    cfg = H.make_config(small_data)
    with Evaluator(cfg) as ev:
        theta_init = cfg.initial_params()
        theta, w0 = ev.theta_and_widths()
        final = {**theta_init, "jet_pt_min": 41.0, "btag_min": 0.3}
        binning = {"index": 0, "bins": 12, "low": 0.0, "high": 240.0}
        want = [
            ev.run_histograms(0, 12, 0.0, 240.0, theta_init, widths=w0),
            ev.run_histograms(0, 12, 0.0, 240.0, final, widths=np.zeros_like(w0)),
        ]
        calls = Passes(ev, monkeypatch)
        got = ev.fill_histograms(
            [
                {**binning, "params": theta_init, "widths": w0},
                {**binning, "params": final, "widths": np.zeros_like(w0)},
            ]
        )
        assert calls.passes == 1
        for g, w in zip(got, want, strict=True):
            assert g.keys() == w.keys() == set(cfg.datasets)
            for name in w:
                np.testing.assert_array_equal(g[name].values(flow=True), w[name].values(flow=True))
                np.testing.assert_array_equal(
                    g[name].variances(flow=True), w[name].variances(flow=True)
                )
        assert got[0]["ttbar"].sum().value != got[1]["ttbar"].sum().value

        # the plots: binning from step 0's states (no pass), both histograms in one pass
        states = ev.run(theta_init, widths=w0)
        calls.passes = 0
        calls.runs.clear()
        paths = plot_histograms(ev, cfg, theta_init, w0, final, tmp_path, initial_states=states)
        assert calls.passes == 1 and not calls.runs
        assert [p.name for p in paths] == ["hist_ttbar.png", "hist_dy.png"]
        # the binning from those states equals the one from a values-only pass
        bins, low, high = histogram_range(cfg, ev, theta_init, w0, states=states)
        _, low0, high0 = histogram_range(cfg, ev, theta_init, w0)
        assert calls.runs == [(0, [float(w) for w in w0])]
        np.testing.assert_allclose([low, high], [low0, high0], rtol=1e-12)


@pytest.mark.parametrize("fraction", [0.3, None])
def test_the_final_hard_cuts_read_keep_best_s_lane(small_data, tmp_path, monkeypatch, fraction):
    """After the hard-cut history (keep-best's uncertainties pass keeps its lane at the
    reported point on the loop's events), the final hard-cut evaluation runs no pass
    and gives what its own values pass gives, bit for bit."""
    opt = {"steps": 2, "replicas": 20,
           **({} if fraction is None else {"validation": {"fraction": fraction}})}
    # a start where both parts keep background events (a defined hard-cut objective)
    loose = {"jet_pt_min": 25.0, "jet_abs_eta_max": 2.5, "btag_min": 0.1, "min_jets": 1}
    cfg = H.make_config(small_data, optimizer=opt, parameters={
        name: {**spec, "init": loose[name]} for name, spec in H.PARAMETERS.items()})
    run = _optimise(cfg, tmp_path)
    run.validation_history()
    calls = Passes(run.ev, monkeypatch)
    kept = run.final()
    assert [order for order, _ in calls.runs] == [1] and run.final_passes == 1  # soft only
    run._kept.clear()
    own = run.final()  # the hard one a pass of its own
    assert [order for order, _ in calls.runs] == [1, 1, 0] and run.final_passes == 2
    assert kept == own and kept["hard"]["objective"] is not None
