"""Keep-best (:mod:`analysis.optimize.keepbest`) and the relaxation gap said aloud
(:func:`analysis.optimize.status.relaxation_gap`), on the small real files of
``../shared/data``: ttbar (NanoAOD v12, 200 events) over Drell-Yan (40 events).

Reference: the hard-cut objective at the start and at the end of the same run (the
history's ``hard`` and ``keep_best.end``: the parameters after the last update), each a
values pass at width 0 (``tests/optimize/test_validation_history.py`` checks those
values against separate passes).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from analysis.cli.parser import main
from analysis.optimize.status import relaxation_gap
from tests.conftest import write_config


def _config(data: Path, *, learning_rate: float, steps: int, keep_best: bool = True,
            widths=(5.0, 0.2), anneal=None) -> dict:
    return {
        "datasets": {
            "tt": {"files": [str(data / "nano_tt_v12.root")], "weight": "genWeight",
                   "role": "signal", "xsec": 831.76},
            "dy": {"files": [str(data / "nano_dy.root")], "weight": "genWeight",
                   "role": "background", "xsec": 6077.2},
        },
        "lumi": 1.0,
        "executor": {"type": "iterative", "chunksize": 100000},
        "parameters": {"jet_pt_min": {"init": 20.0, "bounds": [15.0, 100.0]},
                       "jet_abs_eta_max": {"init": 4.0, "bounds": [1.0, 4.7]},
                       "min_jets": {"init": 2, "bounds": [1, 6], "integer": True}},
        "selection": {"objects": {"collection": "Jet", "cuts": [
            {"var": "pt", "op": ">", "param": "jet_pt_min", "width": widths[0]},
            {"var": "abs_eta", "op": "<", "param": "jet_abs_eta_max", "width": widths[1]}]},
            "events": [{"count": "Jet", "op": ">=", "param": "min_jets"}]},
        "objective": {"terms": [{"type": "significance", "sigma_b": 0.1}]},
        "optimizer": {"name": "adam", "learning_rate": learning_rate, "steps": steps,
                      "keep_best": keep_best, "replicas": 20,
                      **({"anneal": anneal} if anneal else {})},
    }


def _run(tmp_path, capsys, cfg) -> tuple[dict, str]:
    path = write_config(tmp_path / "opt.yaml", cfg)
    out = tmp_path / "out"
    assert main(["optimize", str(path), "-o", str(out), "--no-plots"]) == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    return json.loads((out / "results.json").read_text()), text


def test_a_run_that_ends_worse_than_its_start_reports_a_better_point(shared_data, tmp_path,
                                                                     capsys):
    # learning rate 0.15 on 200 + 40 events: the last point keeps no DY event at all
    # (its hard-cut objective is undefined, measured), step 2 is the best one
    r, text = _run(tmp_path, capsys, _config(shared_data, learning_rate=0.15, steps=6))
    kb = r["keep_best"]
    start = r["history"][0]["hard"]["objective"]
    end = kb["end"]["objective"]
    assert end is None or end > start  # the constructed case: the path ends below its start
    final = r["final"]["hard"]["objective"]
    assert final is not None and final <= start  # minimised: never worse than the start
    assert r["status"]["hard_objective"]["final"] == final
    assert r["status"]["hard_objective"]["initial"] == pytest.approx(start, rel=1e-12)
    # the reported point is the step with the best hard-cut value, and every step has one
    assert all("hard" in h for h in r["history"])
    hard = [h["hard"]["objective"] for h in r["history"]]
    best = min((v, k) for k, v in enumerate(hard) if v is not None)[1]
    assert kb["on"] and kb["by"] == "all" and kb["step"] == best
    assert kb["chosen"]["objective"] == pytest.approx(final, rel=1e-12)
    assert kb["chosen"]["uncertainty"] > 0
    assert r["parameters"] == r["history"][best]["parameters"]
    assert f"keep-best: reported point is step {best} of 6" in text


def test_the_relaxation_gap_is_said_with_its_remedy(shared_data, tmp_path, capsys):
    # widths of 30 GeV and 1.5 in |eta| kept to the end (no annealing): the soft
    # objective is far from the hard one
    cfg = _config(shared_data, learning_rate=0.05, steps=2, widths=(30.0, 1.5),
                  anneal={"schedule": "none"})
    r, text = _run(tmp_path, capsys, cfg)
    gap = r["status"]["relaxation_gap"]
    soft, hard = r["final"]["soft"]["objective"], r["final"]["hard"]["objective"]
    assert gap["soft"] == soft and gap["hard"] == hard
    assert gap["gap"] == pytest.approx(soft - hard, rel=1e-12)
    assert abs(gap["gap"]) > gap["uncertainty"] > 0 and gap["significant"]
    assert gap["remedies"][0].startswith("smaller widths")
    assert "more steps" in " ".join(gap["remedies"])  # 2 steps cannot converge
    assert "soft and hard-cut objective differ" in text and "try smaller widths" in text


def test_the_gap_within_its_uncertainty_is_not_said():
    quiet = relaxation_gap(-1.0, -1.05, 0.1, widths=[5.0], converged=False, factor=0.1,
                           steps=10)
    assert not quiet["significant"] and quiet["remedies"] == []
    loud = relaxation_gap(-1.0, -1.5, 0.1, widths=[0.0], converged=True, factor=0.1, steps=10)
    # hard widths and a converged run: only more events can help (10 % MC uncertainty)
    assert loud["significant"] and [r.split(" (")[0] for r in loud["remedies"]] == ["more events"]
    unknown = relaxation_gap(-1.0, -1.5, None, widths=[5.0], converged=False, factor=0.1,
                             steps=10)  # no replicas: not said
    assert unknown["gap"] == 0.5 and not unknown["significant"]


def test_the_end_stands_in_for_a_best_within_its_noise():
    from analysis.optimize.keepbest import _settled

    rng = np.random.default_rng(1)
    noise = rng.normal(size=50)

    def lanes(start, best, end, spread):  # replicas: each value plus paired noise
        vals = {0: start, 1: best, 2: end}
        return {(i, "held_out"): {"objective": v, "replicas": v + spread * (i + 1) * noise}
                for i, v in vals.items()}

    # sigma of (end - best) over the replicas: 0.1 x std(noise); threshold sqrt(2 ln 3)
    sigma = 0.1 * np.std(noise, ddof=1)
    near = _settled(lanes(-1.0, -5.0, -5.0 + 1.2 * sigma, 0.1), 1, 2, "held_out")
    assert near["kept_last"] and near["sigma"] == pytest.approx(sigma)
    assert near["threshold"] == pytest.approx(np.sqrt(2 * np.log(3)))
    far = _settled(lanes(-1.0, -5.0, -5.0 + 2.0 * sigma, 0.1), 1, 2, "held_out")
    assert not far["kept_last"]
    # an end worse than the start never stands in, however noisy
    worse = _settled(lanes(-1.0, -1.2, -0.9, 10.0), 1, 2, "held_out")
    assert not worse["kept_last"]
    assert _settled(lanes(-1.0, -5.0, -5.0, 0.1), 2, 2, "held_out") is None  # end is best


def test_an_objective_undefined_mid_run_stops_and_reports_the_best_point(shared_data, tmp_path,
                                                                        capsys):
    # a step size growing from 0.1 to 2.0 over 6 steps (optax linear_schedule): step 1
    # improves the hard cuts (-0.47 -> -0.95, measured), then the path leaves the DY
    # events behind until the soft background yield is 0 (at step 9, measured): the
    # significance is undefined there. Before: exit 2 and no results.json.
    cfg = _config(shared_data, learning_rate=0.1, steps=10)
    cfg["optimizer"]["schedule"] = {"name": "linear_schedule", "kwargs": {
        "init_value": 0.1, "end_value": 2.0, "transition_steps": 6}}
    r, text = _run(tmp_path, capsys, cfg)
    st = r["status"]
    m = re.match(r"objective undefined at step (\d+): background yield is 0 \(datasets dy\)",
                 st["stopped"])
    assert m, st["stopped"]
    k = int(m.group(1))
    assert k > 1 and not st["converged"]
    assert f"status: stopped: objective undefined at step {k}: background yield is 0" in text
    # the history up to step k - 1, every objective defined; the checkpoint is step k - 1's
    assert r["steps_run"] == k and [h["step"] for h in r["history"]] == list(range(k))
    assert all(np.isfinite(h["objective"]) for h in r["history"])
    from analysis.optimize.checkpoint import CHECKPOINT, read_checkpoint

    assert read_checkpoint(tmp_path / "out" / CHECKPOINT)["step"] == k
    # keep-best ran on those points: the best hard-cut step, never worse than the start
    start = r["history"][0]["hard"]["objective"]
    final = r["final"]["hard"]["objective"]
    hard = [h["hard"]["objective"] for h in r["history"]]
    best = min((v, j) for j, v in enumerate(hard) if v is not None)[1]
    assert r["keep_best"]["step"] == best and best > 0
    assert final == pytest.approx(hard[best], rel=1e-12) and final < start
    z = st["hard_significance"]
    assert z["final"] >= z["initial"] and st["hard_objective"]["initial"] == pytest.approx(start)
    assert r["parameters"] == r["history"][best]["parameters"]
    assert f"keep-best: reported point is step {best} of {k}" in text


def test_the_points_checked_are_bounded():
    from analysis.optimize.keepbest import checked_points

    assert checked_points(list(range(7))) == list(range(7))  # few: every one
    steps = list(range(61))  # 60 steps and the end
    kept = checked_points(steps, budget=12)
    assert len(kept) == 12 and kept[0] == 0 and kept[-1] == 60
    assert sorted(set(kept)) == kept
    gaps = np.diff(kept)
    assert gaps.max() - gaps.min() <= 1  # evenly spaced
    # validation.every's steps are always among them (results.json's validation.history)
    every = checked_points(steps, every=4, budget=12)
    assert set(range(0, 61, 4)) <= set(every) and {0, 60} <= set(every)


def test_the_budget_follows_the_events():
    from analysis.optimize.keepbest import EVENT_POINTS, POINTS, points_budget

    assert points_budget(400_000) == POINTS == 8  # the demo's 2 x 200k events
    assert points_budget(100_000) == 32
    assert points_budget(240) == EVENT_POINTS // 240  # a few hundred: every step
    assert points_budget(None) == POINTS and points_budget(10**9) == POINTS


def _steps(shared_data, tmp_path, steps: int):
    """An optimisation of the small real files run for ``steps`` steps in this process."""
    from analysis.config.loader import config_from_dict
    from analysis.driver.runner import Evaluator
    from analysis.optimize.loop import Optimization

    config = config_from_dict(_config(shared_data, learning_rate=0.05, steps=steps),
                              source="<test>", base_dir=shared_data)
    ev = Evaluator(config)
    run = Optimization(config, ev, tmp_path / "out")
    while not run.done:
        run.do_step()
    return run, ev


def test_a_long_run_checks_a_bounded_set_of_points(shared_data, tmp_path):
    from analysis.optimize.keepbest import keep_best_report, track_hard

    run, ev = _steps(shared_data, tmp_path, 14)
    with ev:
        # 240 events: every one of the 15 points (14 steps and the end) by default
        assert sum(st.events for st in run.last_states.values()) == 240
        end = run.u.copy()
        every = keep_best_report(track_hard(run))
        assert every["checked"] == list(range(15))
        assert all("hard" in h for h in run.history)
        for h in run.history:
            del h["hard"]
        run.u = end  # keep-best moved it to the chosen point
        kb = keep_best_report(track_hard(run, budget=8))
    assert kb["steps_checked"] == 8 == len(kb["checked"])
    assert kb["checked"][0] == 0 and kb["checked"][-1] == 14
    assert [h["step"] for h in run.history if "hard" in h] == kb["checked"][:-1]
    assert kb["step"] in kb["checked"]
    # the same values where both checked: the thinning picks points, nothing else
    assert kb["initial"] == every["initial"] and kb["end"]["objective"] == every["end"][
        "objective"]
    assert kb["chosen"]["objective"] <= kb["initial"]["objective"]  # never worse
