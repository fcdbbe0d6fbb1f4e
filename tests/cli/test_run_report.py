"""What a run tells its user: effective and hard-cut event counts (against numpy),
the warning on a selection no event passes, and how an optimisation ended
(converged, not converged, parameters at a bound)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot
import yaml

from analysis.cli.commands import status_lines
from analysis.cli.parser import main
from analysis.cli.report import hard_event_counts
from analysis.driver.runner import Evaluator
from analysis.optimize.loop import Optimization
from analysis.pipeline.plan import initial_widths
from analysis.pipeline.results import effective_events, unreliable_reason, width_labels
from tests import opt_helpers as H
from tests.conftest import write_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


# --- counts --------------------------------------------------------------------------


def test_effective_events_and_reasons() -> None:
    assert effective_events(4.0, 4.0) == 4.0  # four unit weights
    assert effective_events(3.0, 5.0) == pytest.approx(1.8)  # 4 x +1 and 1 x -1
    assert effective_events(0.0, 0.0) is None and effective_events(None, 1.0) is None
    assert unreliable_reason(120.0, 100) is None
    assert unreliable_reason(None, 0) == "0 effective events < 10; no event passes the hard cuts"
    assert unreliable_reason(9.5, 12) == "9.5 effective events < 10"
    assert unreliable_reason(50.0, 0) == "no event passes the hard cuts"


@pytest.mark.parametrize(
    "params",
    [None, {"jet_pt_min": 41.0, "btag_min": 0.3, "min_jets": 3.0, "jet_abs_eta_max": 2.0}],
)
@pytest.mark.parametrize("observables", [None, ()])  # () : optimize's pass, no observable
def test_hard_event_counts_match_numpy(small_data, params, observables) -> None:
    cfg = H.make_config(small_data)
    p = {**cfg.initial_params(), **(params or {})}
    with Evaluator(cfg) as ev:
        counts = hard_event_counts(ev, params, observables=observables)
    for ds in ("ttbar", "dy"):
        jets = H.read_jets(sorted((small_data / ds).glob("*.root")))
        jets["weight"] = np.ones_like(jets["weight"])
        sumw, _, _ = H.hard_cut_sums(
            jets, p["jet_abs_eta_max"], [p["jet_pt_min"]], [p["btag_min"]], 6
        )
        assert counts[ds] == int(sumw[0, 0, int(p["min_jets"]) - 1])
    assert counts["ttbar"] > 0


def test_width_labels_name_every_width_of_every_shipped_config() -> None:
    from analysis.config.loader import load_config

    for path in sorted(CONFIGS.glob("*.yaml")):
        cfg = load_config(path)
        labels = width_labels(cfg)
        assert len(labels) == len(initial_widths(cfg)) == len(set(labels)), path
    labels = width_labels(load_config(CONFIGS / "agc_ttbar_optimize.yaml"))
    assert labels[0] == "jets.pt > jet_pt_min" and "count(jets) >= min_jets" in labels


def _agc_reference(btag: float, n_b: int) -> int:
    """Events of the 2015 ttbar file passing the AGC config's hard cuts (awkward)."""
    from tests.chunked_helpers import TTBAR

    a = uproot.open(f"{TTBAR}:Events").arrays(
        ["Jet_pt", "Jet_eta", "Jet_btagCSVV2", "Muon_pt", "Muon_eta", "Electron_pt", "Electron_eta"]
    )
    jets = (a.Jet_pt > 25) & (abs(a.Jet_eta) < 2.4)
    bjets = jets & (a.Jet_btagCSVV2 > btag)
    leptons = ak.sum((a.Muon_pt > 25) & (abs(a.Muon_eta) < 2.4), axis=1) + ak.sum(
        (a.Electron_pt > 25) & (abs(a.Electron_eta) < 2.4), axis=1
    )
    sel = (ak.sum(jets, axis=1) >= 4) & (ak.sum(bjets, axis=1) >= n_b) & (leptons == 1)
    return int(ak.sum(sel))


@pytest.mark.slow  # two passes over the real AGC file (~1 min on a loaded machine)
def test_agc_config_selects_events_and_an_empty_selection_warns(tmp_path, capsys) -> None:
    out = tmp_path / "agc"
    assert main(["evaluate", str(CONFIGS / "agc_ttbar.yaml"), "-o", str(out)]) == 0
    r = json.loads((out / "results.json").read_text())["datasets"]["ttbar_2015"]
    assert r["hard_events"] == _agc_reference(0.5426, 1) == 3
    assert r["effective_events"] == pytest.approx(r["selected_sumw"] ** 2 / r["selected_sumw2"])
    capsys.readouterr()

    # the selection: two b-tags at 0.8 -- no event of the file passes
    data = yaml.safe_load((CONFIGS / "agc_ttbar.yaml").read_text())
    data["selection"][1]["value"] = 2
    data["parameters"]["btag_min"]["init"] = 0.8
    data["datasets"]["ttbar_2015"]["weight"] = "genWeight"
    path = write_config(tmp_path / "issue.yaml", data)
    out = tmp_path / "issue"
    assert main(["evaluate", str(path), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    r = json.loads((out / "results.json").read_text())["datasets"]["ttbar_2015"]
    assert r["hard_events"] == _agc_reference(0.8, 2) == 0
    assert r["reliable"] is False and r["effective_events"] < 10
    assert "no event passes the hard cuts" in r["warning"]
    assert r["observables"]["ht"]["mean"]["value"] is not None  # marked, not hidden
    flat = re.sub(r"\s+", " ", text)
    assert "warning ttbar_2015: statistics unreliable:" in flat
    assert "0 pass the hard cuts" in flat
    assert re.search(r"^\s+ht\*\s*$", text, re.M)  # the statistics marked


# --- how an optimisation ended -------------------------------------------------------


@pytest.fixture
def run(small_data, tmp_path):
    """An Optimization whose history the tests write (no pass is run)."""
    cfg = H.make_config(small_data, optimizer={"steps": 12, "window": 3, "tolerance": 1e-3})
    with Evaluator(cfg) as ev:
        yield Optimization(cfg, ev, tmp_path)


def _history(run, objectives) -> None:
    run.history = [
        {"step": k, "objective": float(v), "significance": -float(v), "parameters": run.params()}
        for k, v in enumerate(objectives)
    ]
    run.step = len(objectives)
    run.converged = run._converged()


FINAL = {
    "soft": {"objective": -5.0, "significance": 5.0},
    "hard": {"objective": -4.5, "significance": 4.5},
}
INITIAL = {"objective": -1.0, "significance": 1.0}


def _report(run, status) -> dict:
    return {
        "status": status,
        "bounds": {
            n: [float(lo), float(hi)]
            for n, lo, hi in zip(run.coords.names, run.coords.lower, run.coords.upper)
        },
    }


def test_status_converged(run) -> None:
    run.config.optimizer.anneal.schedule = "none"
    _history(run, [-1.0, -3.0, -4.0, -4.9, -5.0, -5.0, -5.0, -5.001])
    st = run.status(FINAL, INITIAL)
    assert st["converged"] and st["step"] == 7 and st["advice"] is None
    lines = status_lines(_report(run, st))
    assert lines[0].startswith("status: converged at step 7 (objective changes by <= 0.001")
    assert lines[-1] == (
        "hard-cut objective: -1.000 -> -4.500 (significance 1.000 -> 4.500); "
        "soft - hard at the end: -0.5000"
    )
    assert st["soft_hard_gap"] == pytest.approx(-0.5)


def test_status_says_when_the_hard_cuts_got_worse(run) -> None:
    """The soft objective improved (FINAL's -5.0) but the hard-cut one ended above its
    start (minimised): one more line says so and what to change; not when it improved,
    nor when it is undefined at the end."""
    _history(run, np.linspace(-1, -5, 12))
    worse = {**FINAL, "hard": {"objective": -0.5, "significance": 0.5}}
    lines = status_lines(_report(run, run.status(worse, INITIAL)))
    assert lines[-2].startswith("hard-cut objective: -1.000 -> -0.5000")
    assert lines[-1] == (
        "the hard-cut objective got worse: at these widths the soft objective's optimum is "
        "not the hard cuts'; try narrower widths (the cuts' and counts' width) or a smaller "
        "optimizer.anneal.final_width_factor")
    assert "got worse" not in " ".join(status_lines(_report(run, run.status(FINAL, INITIAL))))
    undefined = {**FINAL, "hard": {"objective": float("nan"), "significance": float("nan")}}
    assert "got worse" not in " ".join(status_lines(_report(run, run.status(undefined,
                                                                            INITIAL))))


def test_status_says_when_the_hard_cut_objective_is_undefined_at_the_end(run) -> None:
    """NaN at the end (results.json: null): one line, naming the datasets of which no
    event passes the final hard cuts."""
    _history(run, np.linspace(-1, -5, 12))
    undefined = {**FINAL, "hard": {"objective": float("nan"), "significance": float("nan")}}
    report = _report(run, run.status(undefined, INITIAL))
    assert status_lines(report)[-1] == (
        "the hard-cut objective is undefined at the final parameters")
    report["datasets"] = {"ttbar": {"hard_events": 12}, "dy": {"hard_events": 0}}
    assert status_lines(report)[-1] == (
        "the hard-cut objective is undefined at the final parameters: no event of dy "
        "passes the final hard cuts")
    report["status"]["hard_objective"]["final"] = None  # as results.json writes NaN
    assert status_lines(report)[-1].endswith("no event of dy passes the final hard cuts")
    assert "undefined" not in " ".join(status_lines(_report(run, run.status(FINAL, INITIAL))))


def test_status_not_converged_creeping_and_oscillating(run) -> None:
    _history(run, np.linspace(-1, -5, 12))  # still falling at the last step
    st = run.status(FINAL, INITIAL)
    assert not st["converged"] and st["step"] is None
    assert "more steps" in st["advice"] and "larger optimizer.learning_rate (now 0.05)" in st["advice"]
    line = status_lines(_report(run, st))[0]
    assert line.startswith("status: NOT converged in 12 steps") and "try more steps" in line

    _history(run, [-1.0, -2.0] * 6)  # up and down
    st = run.status(FINAL, INITIAL)
    assert not st["converged"] and st["advice"].startswith("a smaller optimizer.learning_rate")

    _history(run, np.linspace(-1, -5, 12))  # the objective creeps, a parameter rings
    for k, h in enumerate(run.history):
        h["parameters"] = {**h["parameters"], "jet_pt_min": [30.0, 35.0, 30.0, 25.0][k % 4]}
    assert run.status(FINAL, INITIAL)["advice"].startswith("a smaller optimizer.learning_rate")


def test_status_at_bound(run) -> None:
    _history(run, [-1.0, -2.0, -2.0, -2.0, -2.0])
    run.u = np.array([0.0, 0.4, 1.0, 0.3])
    # minimised: jet_pt_min would go lower (gradient > 0), btag_min would rather go down
    grad = {"jet_pt_min": 0.3, "jet_abs_eta_max": 1.0, "btag_min": 2.0, "min_jets": -1.0}
    final = {**FINAL, "soft": {**FINAL["soft"], "gradient": grad}}
    st = run.status(final, INITIAL)
    assert st["at_bound"] == {"jet_pt_min": "lower", "btag_min": "upper"}
    assert st["beyond_bound"] == ["jet_pt_min"]
    lines = status_lines(_report(run, st))
    assert lines[1] == (
        "at bound: jet_pt_min = 15.00 (lower), btag_min = 0.9500 (upper) (the objective "
        "still improves beyond for jet_pt_min: widen the bounds if that is physical)"
    )


def test_optimize_prints_the_status_and_writes_it(small_data, tmp_path, capsys) -> None:
    path = write_config(tmp_path / "opt.yaml", H.config_dict(small_data, optimizer={"steps": 2}))
    out = tmp_path / "out"
    assert main(["optimize", str(path), "-o", str(out), "--no-plots"]) == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    r = json.loads((out / "results.json").read_text())
    st = r["status"]
    assert not st["converged"] and st["steps_run"] == 2
    assert "status: NOT converged in 2 steps" in text and "hard-cut objective:" in text
    assert st["hard_objective"]["final"] == r["final"]["hard"]["objective"]
    # hard-cut counts of the final cuts, widths keyed by cut
    assert r["datasets"]["ttbar"]["hard_events"] > 1000 and r["datasets"]["ttbar"]["reliable"]
    for d in r["datasets"].values():
        assert d["reliable"] == (d["hard_events"] > 0 and d["effective_events"] >= 10)
    assert list(r["widths"]) == width_labels(H.make_config(small_data))
    assert list(r["final"]["hard"]["widths"].values()) == [0.0] * 4
    assert "and plots in" not in text  # --no-plots
    assert not list(out.glob("*.png"))
