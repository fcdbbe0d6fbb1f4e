"""workspace.json, shapes.root and datacard.txt (analysis.cli.export) of likelihood runs.

References: pyhf (schema validation; the Asimov discovery significance of the written
workspace, computed by pyhf's own q0 on ``Workspace.data``, against the Z of
results.json); uproot reading shapes.root back; the datacard parsed here, line by line,
as Combine reads it (rates against the ROOT integrals, every shape it names present).
Cases: ``optimize`` of configs/agc_likelihood.yaml on small generated samples (the
final hard-cut point: a signal-only bin, so the model's floor is written out) and
``evaluate`` of a second two-channel config (other channels, systematics and widths:
nearly empty soft background bins); ``diffcoffea export`` of an earlier run.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyhf
import pytest
import uproot
import yaml

from analysis.cli import main
from tests.conftest import one_line_error, write_config
from tests.opt_helpers import config_dict

REPO = Path(__file__).resolve().parents[2]
FILES = ("workspace.json", "shapes.root", "datacard.txt")


def pyhf_z(spec: dict, **settings) -> float:
    """pyhf's Asimov discovery significance of a workspace: q0 at mu = 0 on the
    workspace's observations (which we wrote as the mu = 1 expectation)."""
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer(tolerance=1e-14))
    ws = pyhf.Workspace(spec)
    model = ws.model(**({"modifier_settings": settings} if settings else {}))
    data = ws.data(model)
    cfg = model.config
    q0 = pyhf.infer.test_statistics.q0(0.0, data, model, cfg.suggested_init(),
                                       cfg.suggested_bounds(), cfg.suggested_fixed())
    return math.sqrt(float(q0))


EXACT = {"normsys": {"interpcode": "code1"}, "histosys": {"interpcode": "code4p"}}


def parse_datacard(text: str) -> dict:
    """The parts of a shape datacard the checks need (Combine's layout, by keyword)."""
    lines = [ln.split() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    out: dict = {"shapes": [], "systematics": {}, "automcstats": []}
    bins = [ln for ln in lines if ln[0] == "bin"]
    procs = [ln for ln in lines if ln[0] == "process"]
    out["obs_bins"], out["columns"] = bins[0][1:], bins[1][1:]
    out["observation"] = [float(v) for v in next(ln for ln in lines if ln[0] == "observation")[1:]]
    out["processes"], out["indices"] = procs[0][1:], [int(v) for v in procs[1][1:]]
    out["rates"] = [float(v) for v in next(ln for ln in lines if ln[0] == "rate")[1:]]
    for ln in lines:
        if ln[0] == "shapes":
            out["shapes"].append(ln[1:])
        elif len(ln) > 1 and ln[1] in ("lnN", "shape"):
            out["systematics"][ln[0]] = (ln[1], ln[2:])
        elif len(ln) > 1 and ln[1] == "autoMCStats":
            out["automcstats"].append(ln)
        elif ln[0] in ("imax", "jmax"):
            out[ln[0]] = int(ln[1])
    return out


def check_combine(out: Path, section: dict) -> None:
    card = parse_datacard((out / "datacard.txt").read_text())
    (pattern,) = card["shapes"]
    assert pattern[:3] == ["*", "*", "shapes.root"]
    nominal, syst = pattern[3], pattern[4]
    with uproot.open(out / "shapes.root") as f:
        def hist(path):
            assert path in f, f"{path} named by the datacard, not in shapes.root"
            h = f[path]
            assert h.classname.startswith("TH1D")
            return h

        assert card["imax"] == len(section["channels"]) == len(card["obs_bins"])
        for ch, obs in zip(card["obs_bins"], card["observation"], strict=True):
            h = hist(nominal.replace("$CHANNEL", ch).replace("$PROCESS", "data_obs"))
            assert obs == pytest.approx(float(h.values().sum()), rel=1e-12)
        for i, (ch, proc, rate) in enumerate(zip(card["columns"], card["processes"],
                                                 card["rates"], strict=True)):
            h = hist(nominal.replace("$CHANNEL", ch).replace("$PROCESS", proc))
            assert rate == pytest.approx(float(h.values().sum()), rel=1e-12, abs=1e-300)
            np.testing.assert_array_equal(h.axis().edges(), section["channels"][ch]["edges"])
            if proc in section["channels"][ch]["samples"]:
                t = section["channels"][ch]["samples"][proc]
                assert (proc in section["signal"]) == (card["indices"][i] <= 0)
                big = np.abs(t["nominal"]["sumw"]) > 1e-6  # (the floor may zero tiny ones)
                np.testing.assert_allclose(h.values()[big], np.asarray(t["nominal"]["sumw"])[big],
                                           rtol=1e-12)
                np.testing.assert_allclose(h.variances()[big],
                                           np.asarray(t["nominal"]["sumw2"])[big], rtol=1e-12)
            for name, (kind, cells) in card["systematics"].items():
                if kind == "shape" and cells[i] != "-":
                    for side in ("Up", "Down"):
                        hist(syst.replace("$CHANNEL", ch).replace("$PROCESS", proc)
                             .replace("$SYSTEMATIC", name + side))
        for name, norm in section["normalisations"].items():
            kind, cells = card["systematics"][name]
            assert kind == "lnN"
            assert [c != "-" for c in cells] == [p in norm["datasets"] for p in card["processes"]]
        shapes = {s for c in section["channels"].values() for t in c["samples"].values()
                  for s in t["variations"]}
        assert {n for n, (k, _) in card["systematics"].items() if k == "shape"} <= shapes
        assert len(card["automcstats"]) == (len(card["obs_bins"]) if section["mc_stat"] else 0)


def check_workspace(out: Path, results: dict) -> dict:
    spec = json.loads((out / "workspace.json").read_text())
    pyhf.schema.validate(spec, "workspace.json")
    section = results["likelihood"]
    z = section["significance"]["value"]
    assert z > 1.0
    # the exact model (pyhf's normsys code1 is our kappa ** theta) and pyhf's defaults
    assert pyhf_z(spec, **EXACT) == pytest.approx(z, abs=1e-4, rel=0)
    assert pyhf_z(spec) == pytest.approx(z, abs=1e-4, rel=0)
    ws = pyhf.Workspace(spec)
    assert set(ws.channels) == set(section["channels"])
    mods = {(m["name"], m["type"]) for c in spec["channels"] for s in c["samples"]
            for m in s["modifiers"]}
    assert ("mu", "normfactor") in mods
    assert {(n, "normsys") for n in section["normalisations"]} <= mods
    assert ({t for _, t in mods} >= {"staterror"}) == section["mc_stat"]
    return spec


# --- the AGC-like config, optimised -----------------------------------------------------


def agc_config(tmp: Path) -> dict:
    cfg = yaml.safe_load((REPO / "configs" / "agc_likelihood.yaml").read_text())
    for name, ds in cfg["datasets"].items():
        ds["generate"].update(events=4000, files=1, dir=str(tmp / "data" / name))
    cfg["executor"] = {"type": "iterative", "chunksize": 2500}
    cfg["optimizer"]["steps"] = 2
    cfg["lumi"] = 0.05
    return cfg


@pytest.fixture(scope="module")
def agc_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("agc-export")
    path = write_config(tmp / "agc.yaml", agc_config(tmp))
    out = tmp / "out"
    assert main(["optimize", str(path), "-o", str(out), "--quiet", "--no-plots"]) == 0
    return out


@pytest.mark.slow  # a whole optimize of the AGC-like config (~50 s cold); evaluate's export runs by default
def test_optimize_writes_a_workspace_with_the_final_hard_z(agc_run) -> None:
    results = json.loads((agc_run / "results.json").read_text())
    assert results["likelihood"] == results["final"]["hard"]["likelihood"]
    spec = check_workspace(agc_run, results)
    # the hard-cut templates have a bin without background (signal only): the model's
    # floor is written out, so pyhf's Z stays finite and equal
    assert any(s["name"] == "model_floor" for c in spec["channels"] for s in c["samples"])
    check_combine(agc_run, results["likelihood"])


@pytest.mark.slow  # reads the optimize run above
def test_export_command_rewrites_the_same_files(agc_run, tmp_path, capsys) -> None:
    again = tmp_path / "again"
    again.mkdir()
    shutil.copy(agc_run / "results.json", again / "results.json")
    assert main(["export", str(again)]) == 0
    assert capsys.readouterr().out.count("wrote ") == 3
    assert (again / "workspace.json").read_text() == (agc_run / "workspace.json").read_text()
    assert (again / "datacard.txt").read_text() == (agc_run / "datacard.txt").read_text()
    with uproot.open(again / "shapes.root") as a, uproot.open(agc_run / "shapes.root") as b:
        assert sorted(a.keys()) == sorted(b.keys())
        for k in a.classnames():
            if a.classnames()[k].startswith("TH1"):
                np.testing.assert_array_equal(a[k].values(), b[k].values())
                np.testing.assert_array_equal(a[k].variances(), b[k].variances())


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "results.json: no such file"),
        ("{not json", "results.json: not a JSON results file"),
        ('{"parameters": {}}', "key 'likelihood': missing"),
        ('{"likelihood": {"error": "likelihood: channel x: bad"}}',
         "key 'likelihood': no templates (likelihood: channel x: bad)"),
    ],
)
def test_export_refuses_what_has_no_model(tmp_path, capsys, content, expected) -> None:
    if content is not None:
        (tmp_path / "results.json").write_text(content)
    assert main(["export", str(tmp_path), "--quiet"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert str(tmp_path / "results.json") in line and expected in line
    assert not any((tmp_path / f).exists() for f in FILES)


# --- a second two-channel config, evaluated (soft templates) ------------------------------


def two_channel_config(data: Path, out: Path) -> dict:
    return {
        "datasets": config_dict(data)["datasets"],  # ttbar (signal) and dy
        "lumi": 0.02,
        "executor": {"type": "iterative", "chunksize": 1500},
        "parameters": {"jet_pt_min": {"init": 30.0, "bounds": [15.0, 80.0]},
                       "btag_min": {"init": 0.3, "bounds": [0.05, 0.95]}},
        "objects": {
            "jets": {"collection": "Jet", "cuts": [
                {"var": "pt", "op": ">", "param": "jet_pt_min", "width": 5.0}]},
            "bjets": {"from": "jets", "cuts": [
                {"var": "btagDeepFlavB", "op": ">", "param": "btag_min", "width": 0.05}]},
        },
        "selection": [{"count": "jets", "op": ">=", "value": 3}],
        "histograms": [{"name": "sub", "x": "jets[1].pt", "edges": [20, 40, 70, 120, 400]},
                       {"name": "nb", "x": "bjets.pt", "bins": {"n": 3, "lo": 20, "hi": 320}}],
        "systematics": [
            {"name": "jes", "type": "shift", "field": "Jet.pt", "up": 1.05, "down": 0.96},
            {"name": "ps", "type": "weight", "up": "PSWeight[1]", "down": "PSWeight[3]",
             "datasets": ["dy"]},
            {"name": "xs_dy", "type": "lnN", "datasets": ["dy"], "kappa": 1.3},
        ],
        "likelihood": {"channels": {
            "lowb": {"histogram": "sub", "selection": [{"count": "bjets", "op": "<=", "value": 1}]},
            "highb": {"histogram": "nb", "selection": [{"count": "bjets", "op": ">=", "value": 2}]},
        }, "mc_stat": True},
        "objective": {"terms": [{"type": "discovery_significance"}]},
        "output": {"dir": str(out)},
    }


def test_evaluate_writes_a_workspace_with_the_reported_z(small_data, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    path = write_config(tmp_path / "two.yaml", two_channel_config(small_data, out))
    assert main(["evaluate", str(path)]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["likelihood"]["fit"]["converged"]
    for f in FILES:
        assert f"wrote {out / f}" in printed
    spec = check_workspace(out, results)
    # the weight systematic of dy only: no histosys on ttbar, '-' in the datacard
    ttbar = [s for c in spec["channels"] for s in c["samples"] if s["name"] == "ttbar"]
    assert all(("ps", "histosys") not in {(m["name"], m["type"]) for m in s["modifiers"]}
               for s in ttbar)
    check_combine(out, results["likelihood"])
