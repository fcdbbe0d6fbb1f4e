"""Cut widths from the data (:mod:`analysis.driver.autowidth`) on the real v12 ttbar
and Drell-Yan files of ``../shared/data``.

Reference: the rule computed in numpy on the jets read with uproot (a weighted
empirical distribution function, no histogram), per dataset normalised to one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import uproot

from analysis.cli.parser import main
from analysis.config.loader import config_from_dict
from analysis.driver.autowidth import BINS, WINDOW, auto_widths, quantile_width
from analysis.pipeline.plan import initial_widths
from tests.conftest import edited, one_line_error, write_config
from tests.optimize.test_keep_best import _config

BOUNDS = {"pt": (15.0, 100.0), "abs_eta": (1.0, 4.7)}
INIT = {"pt": 20.0, "abs_eta": 4.0}


def _reference(files, var: str) -> float:
    """The rule on numpy histograms of the jets read with uproot (each dataset
    normalised to one inside the bounds), through :func:`quantile_width`."""
    lo, hi = BOUNDS[var]
    counts = np.zeros(BINS)
    for path in files:
        with uproot.open(path) as f:
            a = f["Events"].arrays(["Jet_pt", "Jet_eta", "genWeight"], library="np")
        x = np.concatenate(a["Jet_pt"] if var == "pt" else [abs(e) for e in a["Jet_eta"]])
        w = np.repeat(a["genWeight"], [len(j) for j in a["Jet_pt"]]).astype(np.float64)
        h, _ = np.histogram(x.astype(np.float64), bins=BINS, range=(lo, hi), weights=w)
        counts += h / h.sum()
    return quantile_width(counts, lo, hi, INIT[var])


def test_quantile_width_against_exact_quantiles():
    """An exponential density exp(-(x - 15) / 20) on [15, 115]: its quantiles in closed
    form; the window slides at the lower end."""
    lo, hi, scale = 15.0, 115.0, 20.0
    edges = np.linspace(lo, hi, BINS + 1)
    cdf_exact = lambda x: (1 - np.exp(-(x - lo) / scale)) / (1 - np.exp(-(hi - lo) / scale))  # noqa: E731
    counts = np.diff(cdf_exact(edges))
    quantile = lambda p: lo - scale * np.log(1 - p * (1 - np.exp(-(hi - lo) / scale)))  # noqa: E731
    for t in (20.0, 40.0, 110.0):
        a = min(max(cdf_exact(t) - WINDOW / 2, 0.0), 1.0 - WINDOW)
        exact = (quantile(a + WINDOW) - quantile(a)) / 8
        assert quantile_width(counts, lo, hi, t) == pytest.approx(exact, rel=1e-4), t
    # empty bins [15, 20) below t (a gap): the quantiles skip them, as if the range
    # began at 20 (a flat stretch's last edge is where the entries start)
    gap = counts.copy()
    gap[:100] = 0.0
    assert quantile_width(gap, lo, hi, 16.0) == pytest.approx(
        quantile_width(counts[100:], 20.0, hi, 20.0), rel=1e-9)
    assert quantile_width(np.zeros(BINS), lo, hi, 20.0) == (hi - lo) / 20


def test_widths_left_out_follow_the_rule(shared_data):
    cfg = _config(shared_data, learning_rate=0.05, steps=1)
    cfg = edited(edited(cfg, "selection/objects/cuts/0/width", None),
                 "selection/objects/cuts/1/width", "auto")
    del cfg["selection"]["objects"]["cuts"][0]["width"]
    config = config_from_dict(cfg, source="<test>", base_dir=shared_data)
    assert initial_widths(config)[:2] == [0.0, 0.0]  # before the data: hard
    out = auto_widths(config)
    files = [shared_data / "nano_tt_v12.root", shared_data / "nano_dy.root"]
    for var, label in (("pt", "Jet.pt"), ("abs_eta", "Jet.abs_eta")):
        assert out["widths"][label] == pytest.approx(_reference(files, var), rel=1e-9), label
    assert initial_widths(config)[:2] == [out["widths"]["Jet.pt"], out["widths"]["Jet.abs_eta"]]
    assert initial_widths(config)[2] == 1.0  # the count keeps its integer smoothing


def test_a_likelihood_config_with_systematics_gets_the_same_widths(shared_data):
    # the auxiliary pass drops the likelihood; its systematics went with it only since
    # a config with systematics and no likelihood is refused (bench_trust's likelihood
    # config failed there)
    cfg = _config(shared_data, learning_rate=0.05, steps=1)
    del cfg["selection"]["objects"]["cuts"][0]["width"]
    cfg.update(histograms=[{"name": "ht", "x": "sum(Jet.pt)", "edges": [0, 200, 400, 1000]}],
               systematics=[{"name": "dy_norm", "type": "lnN", "datasets": ["dy"],
                             "kappa": 1.1},
                            {"name": "jes", "type": "shift", "field": "Jet.pt", "up": 1.03,
                             "down": 0.97}],
               likelihood={"channels": {"sr": {"histogram": "ht"}}, "mc_stat": True},
               objective={"terms": [{"type": "discovery_significance"}]})
    config = config_from_dict(cfg, source="<test>", base_dir=shared_data)
    out = auto_widths(config)
    files = [shared_data / "nano_tt_v12.root", shared_data / "nano_dy.root"]
    assert out["widths"]["Jet.pt"] == pytest.approx(_reference(files, "pt"), rel=1e-9)


def test_a_number_wins_and_nothing_runs_without_a_wanted_width(shared_data):
    config = config_from_dict(_config(shared_data, learning_rate=0.05, steps=1),
                              source="<test>", base_dir=shared_data)
    assert auto_widths(config) is None and initial_widths(config) == [5.0, 0.2, 1.0]


@pytest.mark.parametrize("width", [-1.0, "fast"])
def test_a_bad_width_is_one_line(shared_data, tmp_path, capsys, width):
    cfg = edited(_config(shared_data, learning_rate=0.05, steps=1),
                 "selection/objects/cuts/0/width", width)
    path = write_config(tmp_path / "bad.yaml", cfg)
    assert main(["optimize", str(path), "-o", str(tmp_path / "o"), "--no-plots"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "bad.yaml: selection.objects.cuts[0].width" in line or "width" in line, line
    assert "a number >= 0 or 'auto'" in line, line


@pytest.mark.slow  # a whole optimize run; the rule itself is checked above in the default run
def test_optimize_without_widths_reports_them_and_ends_no_worse(shared_data, tmp_path, capsys):
    cfg = _config(shared_data, learning_rate=0.05, steps=8)
    for cut in cfg["selection"]["objects"]["cuts"]:
        del cut["width"]
    path = write_config(tmp_path / "opt.yaml", cfg)
    assert main(["optimize", str(path), "-o", str(tmp_path / "o"), "--no-plots"]) == 0
    text = capsys.readouterr().out
    r = json.loads((tmp_path / "o" / "results.json").read_text())
    auto = r["auto_widths"]["widths"]
    assert set(auto) == {"Jet.pt", "Jet.abs_eta"} and all(w > 0 for w in auto.values())
    assert list(r["widths"].values())[:2] == [auto["Jet.pt"], auto["Jet.abs_eta"]]
    assert "widths from the data" in text
    h = r["status"]["hard_objective"]
    assert h["final"] <= h["initial"]
    # the gradient is not zero: the widths are not hard cuts
    assert any(abs(g) > 0 for g in r["history"][0]["gradient"].values())
