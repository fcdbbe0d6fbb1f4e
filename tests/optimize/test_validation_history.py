"""``optimizer.validation: {every: N, keep_best: true}``: the hard-cut objective on the
training and held-out parts every N steps (results.json ``validation.history``) and the
best held-out step as the reported point.

Reference: each history entry against a separate evaluation at that step's parameters
(:meth:`Optimization.hard_on`: a plain values pass of the Evaluator on the part, and the
bootstrap on a pass per part, not the one lanes pass the history comes from).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from analysis.cli.parser import main
from analysis.driver.runner import Evaluator
from analysis.optimize.loop import Optimization, config_fingerprint
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config
from tests.optimize.test_validation import LOOSE

VALIDATION = {"fraction": 0.3, "every": 1, "keep_best": True}


def _run(small_data, tmp_path, capsys, *, steps=5, learning_rate=0.02, best=True,
         **validation):
    cfg = H.config_dict(small_data, parameters=LOOSE, optimizer={
        "steps": steps, "learning_rate": learning_rate, "validation": validation,
        "replicas": 20, "keep_best": best})
    path = write_config(tmp_path / "opt.yaml", cfg)
    out = tmp_path / "out"
    assert main(["optimize", str(path), "-o", str(out), "--no-plots"]) == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    return json.loads((out / "results.json").read_text()), text


def _same(a, b) -> bool:
    return a is None and b is None or (a is not None and b is not None
                                       and a == pytest.approx(b, rel=1e-12))


def test_history_entries_are_the_hard_cut_objective_at_those_steps(small_data, tmp_path,
                                                                   capsys):
    # learning rate 0.03: the held-out part (~900 background events) runs out of
    # background at step 4 (measured), the training part at step 6; the best held-out
    # step is the last defined one, not the run's end
    r, text = _run(small_data, tmp_path, capsys, steps=6, learning_rate=0.03, **VALIDATION)
    v = r["validation"]
    hist = v["history"]
    # every step and the end (the parameters after the last update)
    assert [e["step"] for e in hist] == list(range(7)) and r["steps_run"] == 6
    config = H.make_config(small_data, parameters=LOOSE, optimizer={
        "replicas": 20, "validation": VALIDATION})
    with Evaluator(config) as ev:
        run = Optimization(config, ev, tmp_path / "ref")
        points = [r["history"][k]["parameters"] for k in range(6)]
        for entry, p in zip(hist, points):  # (the end: below, through the last update)
            for part in ("train", "held_out"):
                ref = run.hard_on(p, part)
                assert _same(entry[part], ref["objective"]), (entry, part, ref)
                assert _same(entry["significance"][part], ref["significance"])
                assert _same(entry["uncertainty"][part], ref["uncertainty"])
            if entry["gap"] is not None:
                sigma = np.hypot(entry["uncertainty"]["train"], entry["uncertainty"]["held_out"])
                assert entry["gap"] == entry["train"] - entry["held_out"]
                assert entry["gap_sigma"] == pytest.approx(entry["gap"] / sigma, rel=1e-12)
    defined = [e for e in hist if e["held_out"] is not None]
    assert 2 <= len(defined) < len(hist)  # both kinds, as measured
    assert len({e["held_out"] for e in defined}) == len(defined)  # the steps moved
    # keep_best: the step with the lowest held-out hard-cut objective is reported
    best = min(defined, key=lambda e: e["held_out"])
    assert 0 < best["step"] < r["steps_run"]
    assert v["best_step"] == best["step"] and v["keep_best"] is True and v["every"] == 1
    assert v["held_out"]["final"] == pytest.approx(best["held_out"], rel=1e-12)
    assert v["train"]["final"] == pytest.approx(best["train"], rel=1e-12)
    assert r["final"]["soft"]["parameters"] == r["history"][best["step"]]["parameters"]
    assert (f"keep-best: reported point is step {best['step']} of 6, the best hard-cut "
            f"objective on the held-out part of 7 checked") in text
    assert r["keep_best"]["step"] == best["step"] and r["keep_best"]["by"] == "held_out"
    # steps, history (values, then the MC uncertainties: the validation's lanes and the
    # final hard cuts' too), the final soft pass, counts
    assert r["passes"] == r["steps_run"] + 2 + 1 + 1


def test_without_keep_best_the_last_point_is_reported(small_data, tmp_path, capsys):
    r, text = _run(small_data, tmp_path, capsys, fraction=0.3, every=3, best=False)
    v = r["validation"]
    assert [e["step"] for e in v["history"]] == [0, 3, 5]
    assert v["best_step"] is None and "keep-best:" not in text
    # the end entry is the report's final point, on both parts
    assert v["history"][-1]["train"] == pytest.approx(v["train"]["final"], rel=1e-12)
    assert v["history"][-1]["held_out"] == pytest.approx(v["held_out"]["final"], rel=1e-12)
    assert v["history"][0]["held_out"] == pytest.approx(v["held_out"]["initial"], rel=1e-12)


@pytest.mark.parametrize(("validation", "key", "says"), [
    ({"fraction": 0.3, "every": 0}, "optimizer.validation.every", ">= 1"),
    ({"fraction": 0.3, "every": -3}, "optimizer.validation.every", ">= 1"),
    ({"keep_best": True}, "optimizer.validation.keep_best", "needs optimizer.validation.fraction"),
    ({"every": 2}, "optimizer.validation.every", "needs optimizer.validation.fraction"),
])
def test_bad_values_are_one_line_errors(small_data, tmp_path, capsys, validation, key, says):
    path = write_config(tmp_path / "bad.yaml", H.config_dict(
        small_data, optimizer={"validation": validation}))
    assert main(["optimize", str(path), "-o", str(tmp_path / "o"), "--no-plots"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert f"bad.yaml: {key}: " in line and says in line, line


def test_every_and_keep_best_leave_the_path_and_its_checkpoint_alone(small_data):
    """They act after the loop: a run resumes with them changed; the fraction does not."""
    def fingerprint(**validation):
        return config_fingerprint(H.make_config(small_data, optimizer={"validation": validation}))

    plain = fingerprint(fraction=0.3)
    assert fingerprint(fraction=0.3, every=4, keep_best=True) == plain
    assert fingerprint(fraction=0.4) != plain
