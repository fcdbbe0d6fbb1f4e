"""The validation split and the MC uncertainty of the hard-cut objective in ``optimize``.

References: the bootstrap standard deviation of the hard-cut Z_A is compared with a
bootstrap computed independently (uproot + numpy, numpy's own Poisson draws, the
objective's formula in :func:`tests.opt_helpers.asimov_numpy`); results.json's
``validation`` and ``uncertainty`` are checked against the contract's names and
arithmetic.
"""

from __future__ import annotations

import json
import re

import awkward as ak
import numpy as np
import pytest
import uproot

from analysis.cli.parser import main
from analysis.driver.runner import Evaluator
from analysis.optimize.loop import Optimization
from tests import opt_helpers as H
from tests.conftest import write_config

CUTS = {"jet_pt_min": 25.0, "jet_abs_eta_max": 2.5, "btag_min": 0.1, "min_jets": 1}
# a start where both parts keep background events (the small sample has ~1,800 per part)
LOOSE = {name: {**spec, "init": CUTS[name]} for name, spec in H.PARAMETERS.items()}
XSEC = {"ttbar": 831.76, "dy": 6077.0}


def _numpy_bootstrap_std(small_data, k: int) -> tuple[float, float]:
    """(nominal Z_A, bootstrap std of Z_A) at CUTS over all events, numpy only."""
    rng = np.random.default_rng(7)
    data = {}
    for name in XSEC:
        a = ak.concatenate([uproot.open(p)["Events"].arrays(
            ["Jet_pt", "Jet_eta", "Jet_btagDeepFlavB", "genWeight"])
            for p in sorted((small_data / name).glob("*.root"))])
        ok = ((a.Jet_pt > CUTS["jet_pt_min"]) & (abs(a.Jet_eta) < CUTS["jet_abs_eta_max"])
              & (a.Jet_btagDeepFlavB > CUTS["btag_min"]))
        data[name] = (ak.to_numpy(a.genWeight).astype(np.float64),
                      ak.to_numpy(ak.sum(ok, axis=1) >= CUTS["min_jets"]))

    def z(mult):
        y = {}
        for name, (w, sel) in data.items():
            ww = w * mult[name]
            norm = XSEC[name] * 10.0 / ww.sum()
            y[name] = (norm * ww[sel].sum(), norm**2 * (ww[sel] ** 2).sum(),
                       (norm * ww.sum() / mult[name].sum()) ** 2)
        s, (b, var, floor) = y["ttbar"][0], y["dy"]
        return float(H.asimov_numpy(s, b, (0.1 * b) ** 2 + var + floor))

    nominal = z({n: np.ones(len(d[0])) for n, d in data.items()})
    reps = [z({n: rng.poisson(1.0, len(d[0])).astype(float) for n, d in data.items()})
            for _ in range(k)]
    return nominal, float(np.std(reps, ddof=1))


def test_hard_objective_uncertainty_matches_a_numpy_bootstrap(small_data, tmp_path):
    k = 300
    cfg = H.make_config(small_data, optimizer={"replicas": k})
    with Evaluator(cfg) as ev:
        res = Optimization(cfg, ev, tmp_path).hard_on(CUTS, "all")
    nominal, std = _numpy_bootstrap_std(small_data, 600)
    assert res["significance"] == pytest.approx(nominal, rel=1e-9)
    # two estimates of one standard deviation: 300 and 600 replicas (~4 % and ~3 %)
    assert res["uncertainty"] == pytest.approx(std, rel=0.15)


def test_results_json_says_what_survives_on_held_out_events(small_data, tmp_path, capsys):
    cfg = H.config_dict(small_data, parameters=LOOSE, optimizer={
        "steps": 2, "validation": {"fraction": 0.3}, "replicas": 20})
    path = write_config(tmp_path / "opt.yaml", cfg)
    out = tmp_path / "out"
    assert main(["optimize", str(path), "-o", str(out), "--no-plots"]) == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    r = json.loads((out / "results.json").read_text())
    v, u = r["validation"], r["uncertainty"]
    for part in ("train", "held_out"):
        assert set(v[part]) >= {"initial", "final"}
        assert all(isinstance(v[part][p], float) for p in ("initial", "final"))
    assert v["gap"] == v["train"]["final"] - v["held_out"]["final"]
    sigma = np.hypot(v["uncertainty"]["train"]["final"], v["uncertainty"]["held_out"]["final"])
    assert v["gap_sigma"] == pytest.approx(v["gap"] / sigma, rel=1e-12)
    assert u["initial"] > 0 and u["final"] > 0
    # the optimisation saw the training part: its final hard value is the run's
    assert v["train"]["final"] == r["final"]["hard"]["objective"]
    assert v["train"]["initial"] == r["status"]["hard_objective"]["initial"]
    assert r["hard_all"]["objective"]["final"] != v["train"]["final"]
    assert re.search(r"all events: Z = [\d.]+ \+- [\d.]+ \(MC stat\.\) -> Z = ", text)
    assert "validation (30.00 % held out)" in text and v["message"] in text


def test_without_the_split_no_validation_but_an_uncertainty(small_data, tmp_path):
    path = write_config(tmp_path / "opt.yaml", H.config_dict(
        small_data, optimizer={"steps": 1, "replicas": 10}))
    out = tmp_path / "out"
    assert main(["optimize", str(path), "-o", str(out), "--no-plots", "--quiet"]) == 0
    r = json.loads((out / "results.json").read_text())
    assert "validation" not in r
    assert r["uncertainty"]["final"] > 0
    assert r["hard_all"]["objective"]["final"] == r["final"]["hard"]["objective"]


@pytest.mark.parametrize("fraction", [0.3, None])
def test_one_pass_gives_what_a_pass_per_part_gives(small_data, tmp_path, fraction):
    """validation()'s single lanes pass against hard_on's pass per (point, part)."""
    opt = {"replicas": 30, **({} if fraction is None else {"validation": {"fraction": fraction}})}
    cfg = H.make_config(small_data, parameters=LOOSE, optimizer=opt)
    final = {**CUTS, "jet_pt_min": 40.0, "btag_min": 0.3}
    with Evaluator(cfg) as ev:
        run = Optimization(cfg, ev, tmp_path)
        one = run.validation(CUTS, final)
        assert run.passes == 1  # the replicas' totals ride the same pass
        run._validation_lanes = lambda *a: None  # the pass-per-part path
        run._replica_totals = None  # and the totals' own pass
        per_part = run.validation(CUTS, final)
        assert run.passes == (4 if fraction is None else 8)
    assert one.keys() == per_part.keys()

    def leaves(d, path=()):
        if isinstance(d, dict):
            for k, v in d.items():
                yield from leaves(v, (*path, k))
        else:
            yield path, d

    a, b = dict(leaves(one)), dict(leaves(per_part))
    assert a.keys() == b.keys() and len(a) >= (7 if fraction is None else 20)
    for key, x in a.items():
        if isinstance(x, float):
            assert x == pytest.approx(b[key], rel=1e-12, abs=1e-300), key
        else:
            assert x == b[key], key


@pytest.mark.parametrize("fraction", [0.3, None])
def test_the_validation_rides_the_history_s_uncertainties_pass(small_data, tmp_path, fraction):
    """After the hard-cut history (keep-best's uncertainties pass keeps its lanes, all
    events among them), the validation at the start and the reported point runs no
    pass and gives bit for bit what its own pass gives: the report, the start's value,
    the states it leaves (the last point on all events) and every event's sum of
    weights. A point that pass did not see: a pass of its own."""
    import jax

    opt = {"steps": 2, "replicas": 20,
           **({} if fraction is None else {"validation": {"fraction": fraction}})}
    cfg = H.make_config(small_data, parameters=LOOSE, optimizer=opt)
    initial = cfg.initial_params()

    def text(x):  # bit for bit (floats as repr), arrays included
        return json.dumps(x, sort_keys=True, default=lambda a: np.asarray(a).tolist())

    def leaves(states):
        return [np.asarray(x) for st in states.values()
                for x in jax.tree_util.tree_leaves(st.taylor()[0])]

    with Evaluator(cfg) as ev:
        run = Optimization(cfg, ev, tmp_path)
        while not run.done:
            run.do_step()
        run.validation_history()
        final = run.final()["hard"]["parameters"]
        passes = run.passes
        kept = run.validation(initial, final)
        assert run.passes == passes
        seen = (text(run.start_hard), leaves(run.last_states), run.all_sumw)
        run._kept.clear()  # the validation's own pass
        own = run.validation(initial, final)
        assert run.passes == passes + 1
        assert text(kept) == text(own)
        assert seen[0] == text(run.start_hard) and seen[2] == run.all_sumw
        assert all(np.array_equal(a, b) for a, b in zip(seen[1], leaves(run.last_states),
                                                         strict=True))
        run.validation_history()  # kept again; an unseen start: one pass
        run.validation({**initial, "jet_pt_min": 31.0}, final)
        assert run.passes == passes + 4


def _part(initial, final, sigma):
    return {"initial": {"objective": initial, "significance": -initial, "uncertainty": None},
            "final": {"objective": final, "significance": None if final is None else -final,
                      "uncertainty": sigma}}


@pytest.mark.parametrize(("held", "flagged", "says"), [
    (-9.0, False, "agree within"),          # gap -1.0 over sigma 0.5: -2.0 sigma, not beyond
    (-8.9, True, "fits the simulation's fluctuations"),
    (-11.1, True, "held-out part is better"),
])
def test_the_gap_is_flagged_beyond_the_threshold(held, flagged, says):
    from analysis.optimize.status import validation_report

    res = {"all": _part(-3.0, -9.5, 0.3), "train": _part(-3.0, -10.0, 0.3),
           "held_out": _part(-3.0, held, 0.4)}
    v = validation_report(res, 0.3, 2.0)["validation"]
    assert v["gap"] == pytest.approx(-10.0 - held)
    assert v["gap_sigma"] == pytest.approx((-10.0 - held) / 0.5)
    assert v["flagged"] is flagged and says in v["message"]


def test_a_training_part_emptied_of_background_is_flagged():
    """Measured with a learned score on 2 x 150 events (docs/guide/optimisation.md): the
    network removes every training background event (soft Z 6.4), the held-out part
    keeps some (hard Z 1.90 +- 0.38); the training part's hard-cut Z_A is undefined, so
    no gap can be computed, and the report must still say what happened."""
    from analysis.optimize.status import validation_report

    res = {"all": _part(-1.1, -2.6, 0.2), "train": _part(-1.07, None, None),
           "held_out": _part(-1.23, -1.90, 0.38)}
    v = validation_report(res, 0.5, 2.0)["validation"]
    assert v["gap"] is None and v["gap_sigma"] is None
    assert v["flagged"] is True
    assert "fits the simulation's fluctuations" in v["message"]
    # both undefined: nothing to compare, nothing flagged
    res["held_out"] = _part(-1.23, None, None)
    v = validation_report(res, 0.5, 2.0)["validation"]
    assert v["flagged"] is False and "not compared" in v["message"]
