"""A Z from the floor alone: bins with signal whose background is at most the model's
floor (no background event passes) are reported (results.json's
``likelihood.floor_only``) with the share of the Asimov q0 they carry (a hand
computation), and said as a warning at the start and the end of a run, and in the
datacard, where they carry more than FLOOR_SHARE; ``likelihood.floor`` silences it."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from analysis import likelihood as lk
from analysis import stats
from analysis.optimize.lksection import floor_only
from tests.likelihood.test_yaml_pipeline import lk_config

SIG = [2.0, 3.0, 4.0]


def hist(sumw):
    sumw = np.asarray(sumw, dtype=np.float64)
    return stats.Histogram([0.0, 10.0, 20.0, 40.0], np.r_[0.0, sumw, 0.0],
                           np.r_[0.0, 0.1 * sumw, 0.0])


def states(bkg, sig=SIG):
    return {"sig": {"h": hist(sig)}, "dy": {"h": hist(bkg)}}


MODEL = lk.Model([lk.Channel("sr", "h")], ["sig"])


def q0_by_hand(s, b):
    """One bin's Asimov q0 without nuisances (b: already floored)."""
    return 2.0 * ((s + b) * math.log(1.0 + s / b) - s) if s > 0 else 0.0


def test_the_share_of_q0_is_the_hand_computation():
    bkg = [5.0, 1.0, 0.0]
    share, worst = lk.floor_share(lk.templates(states(bkg), MODEL), MODEL)
    q0 = [q0_by_hand(s, max(b, MODEL.floor)) for s, b in zip(SIG, bkg)]
    assert share == pytest.approx(q0[2] / sum(q0), rel=1e-12) and share > 0.9
    assert worst == ("sr", 2, 4.0, 0.0)


def test_the_report_names_the_bin_the_datasets_and_the_remedies():
    s = states([5.0, 1.0, 0.0])
    rep = lk.floor_report(lk.templates(s, MODEL), MODEL, lk.edges(s, MODEL))
    msg = rep["message"]
    assert "\n" not in msg, msg
    assert msg.startswith("likelihood: channel 'sr', bin 2 [20, 40): signal 4 over a "
                          "background of 0 (dy): 96.7 %") and "% of the Asimov q0" in msg, msg
    assert "model's floor (1e-09) alone, so Z measures the floor" in msg, msg
    for remedy in ("more background MC", "a wider region", "likelihood: {floor: N}"):
        assert remedy in msg, msg
    # the Z it stands beside: the floor's, ~ sqrt(2 s ln(s / floor)) for that bin
    assert float(lk.discovery_significance(s, MODEL)) > 8.0


@pytest.mark.parametrize("bkg,sig", [([5.0, 1.0, 1e-3], SIG), ([5.0, 1.0, 0.0], [2.0, 3.0, 0.0])])
def test_populated_bins_or_an_empty_signal_bin_report_nothing(bkg, sig):
    assert lk.floor_report(lk.templates(states(bkg, sig), MODEL), MODEL) is None


def test_a_small_share_is_reported_without_a_warning():
    """A tail bin a background does not reach, with little signal (AGC's lead jet above
    300 GeV): in results.json, not said; ``likelihood.floor`` set: never said."""
    tmpl = lk.templates(states([5.0, 1.0, 0.0], [20.0, 30.0, 1e-4]), MODEL)
    unset = SimpleNamespace(likelihood=SimpleNamespace(floor=None))
    rep = floor_only(unset, tmpl, MODEL)
    assert 0 < rep["share"] < lk.FLOOR_SHARE and rep["warn"] is False
    big = lk.templates(states([5.0, 1.0, 0.0]), MODEL)
    assert floor_only(unset, big, MODEL)["warn"] is True
    chosen = SimpleNamespace(likelihood=SimpleNamespace(floor=1e-9))
    assert floor_only(chosen, big, MODEL)["warn"] is False


def test_a_floor_above_the_background_counts_it_as_the_floor():
    m = lk.Model([lk.Channel("sr", "h")], ["sig"], floor=0.01)
    assert lk.floor_share(lk.templates(states([5.0, 1.0, 0.005]), m), m)[1] == (
        "sr", 2, 4.0, 0.005)
    assert lk.floor_report(lk.templates(states([5.0, 1.0, 0.02]), m), m) is None


def _no_dy(small_data, **likelihood):
    """The likelihood pipeline's config with a Drell-Yan sample of no weight (as one that
    no event of passes the cuts): every bin's background is the floor alone."""
    cfg = copy.deepcopy(lk_config(small_data))
    cfg["datasets"]["dy"]["xsec"] = 1e-30
    cfg["likelihood"].update(likelihood, upper_limit=False)
    return cfg


def _run(cfg, tmp_path, *args):
    from analysis.cli.parser import main
    from tests.conftest import write_config

    path = write_config(tmp_path, cfg)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main([args[0], str(path), "--output", str(tmp_path / "out"), *args[1:]])
    assert rc == 0, err.getvalue()
    return out.getvalue(), err.getvalue(), tmp_path / "out"


def test_evaluate_warns_and_flags_results_and_datacard(small_data, tmp_path):
    _, err, out = _run(_no_dy(small_data), tmp_path, "evaluate", "--quiet")
    lines = [x for x in err.splitlines() if "floor" in x]
    assert len(lines) == 1 and lines[0].startswith("diffcoffea: warning: likelihood: channel "), err
    assert "(dy)" in lines[0] and "floor (1e-09) alone" in lines[0], lines
    flag = json.loads((out / "results.json").read_text())["likelihood"]["floor_only"]
    assert flag["warn"] is True and flag["share"] > 0.99 and flag["background"] < 1e-9
    card = (out / "datacard.txt").read_text()
    assert card.startswith("# WARNING: likelihood: channel ") and "model_floor" in card


@pytest.mark.slow  # one evaluate pass, ~30 s
def test_an_explicit_floor_is_not_warned_of(small_data, tmp_path):
    _, err, out = _run(_no_dy(small_data, floor=0.5), tmp_path, "evaluate", "--quiet")
    assert "floor" not in err, err
    sec = json.loads((out / "results.json").read_text())["likelihood"]
    assert sec["floor"] == 0.5 and sec["floor_only"]["warn"] is False
    assert "WARNING" not in (out / "datacard.txt").read_text()


@pytest.mark.slow  # 2 optimisation steps and the final passes, ~60 s
def test_optimize_warns_at_the_start_and_at_the_end(small_data, tmp_path):
    cfg = _no_dy(small_data)
    cfg["optimizer"] = {"name": "adam", "learning_rate": 0.05, "steps": 2}
    stdout, err, out = _run(cfg, tmp_path, "optimize", "--no-plots")
    start = [x for x in err.splitlines() if "floor (1e-09) alone" in x]
    assert len(start) == 1 and start[0].startswith("diffcoffea: warning: likelihood: "), err
    said = " ".join(stdout.split())  # the table's console wraps long lines
    assert said.count("floor (1e-09) alone") == 1 and "warning likelihood: channel " in said, said
    r = json.loads((out / "results.json").read_text())
    assert r["likelihood"]["floor_only"]["warn"] is True
    assert r["final"]["soft"]["likelihood"]["floor_only"]["warn"] is True
