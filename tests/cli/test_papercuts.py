"""Small things a new user meets: ``--debug`` anywhere, every config error in one run,
``skhep:`` files named as written, a chunk of NanoEvents for the invariance helper,
a hint for raw awkward arrays times a parameter, units on plots, plots as drawn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import awkward as ak
import hist
import numpy as np
import pytest
import uproot
import yaml

from analysis import stats
from analysis.cli.parser import main
from analysis.cli.units import units_of
from analysis.config.loader import config_from_dict, load_config
from analysis.errors import ConfigError
from tests.chunked_helpers import TTBAR, analysis_config
from tests.conftest import REPO, write_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _bad_config(tmp_path: Path) -> Path:
    data = analysis_config()
    data["executor"].update(workers=0, chunksize="abc")
    data["parameters"]["jet_pt_min"]["bounds"] = [300.0, 200.0]
    return write_config(tmp_path / "bad.yaml", data)


def test_debug_after_the_subcommand(tmp_path, capsys) -> None:
    path = _bad_config(tmp_path)
    for argv in (["--debug", "evaluate", str(path)], ["evaluate", str(path), "--debug"],
                 ["scan", str(path), "--debug"], ["optimize", "--debug", str(path)]):
        with pytest.raises(ConfigError):
            main(argv)
    assert main(["evaluate", str(path)]) == 2  # without: the lines, no traceback


def test_debug_holds_for_one_call(tmp_path, capsys) -> None:
    # main() again in the same process (a notebook, these tests): no handler left bound
    # to an earlier stderr (a closed one gave "--- Logging error ---"), no DEBUG level.
    import logging

    log = logging.getLogger("analysis")
    before = (list(log.handlers), log.level)
    with pytest.raises(ConfigError):  # --debug: the traceback
        main(["evaluate", str(_bad_config(tmp_path)), "--debug"])
    assert (list(log.handlers), log.level) == before


def test_every_config_error_in_one_run(tmp_path, capsys) -> None:
    path = _bad_config(tmp_path)
    assert main(["evaluate", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith(f"diffcoffea: error: {path}: ")
    assert all(str(path) in line for line in lines)
    joined = "\n".join(lines)
    for key in ("executor.workers", "executor.chunksize", "parameters.jet_pt_min"):
        assert key in joined


def test_skhep_errors_name_the_entry_as_written(tmp_path, capsys, monkeypatch) -> None:
    import analysis.driver.files as files  # resolve_skhep reads SKHEP_CACHE there

    cache = tmp_path / "skhepdata"
    cache.mkdir()
    (cache / "broken.root").write_bytes(b"not a ROOT file at all" * 10)
    monkeypatch.setattr(files, "SKHEP_CACHE", cache)
    data = analysis_config({"ttbar": {"files": ["skhep:broken.root"], "weight": "genWeight"}})
    path = write_config(tmp_path / "cfg.yaml", data)
    assert main(["evaluate", str(path), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "skhep:broken.root" in err and str(cache) not in err
    assert err.count("\n") == 1


def test_load_chunk_gives_the_entries_as_nanoevents() -> None:
    from analysis.testing import load_chunk

    events = load_chunk(TTBAR, dataset="ttbar", entry_start=10, entry_stop=70)
    assert len(events) == 60
    assert events.metadata["dataset"] == "ttbar" and events.metadata["entrystart"] == 10
    want = uproot.open(f"{TTBAR}:Events")["Jet_pt"].array(entry_start=10, entry_stop=70)
    assert ak.all(ak.flatten(events.Jet.pt) == ak.flatten(want))


@pytest.mark.slow  # compiles the processor's kernel
def test_load_chunk_feeds_the_invariance_helper() -> None:
    from analysis.testing import assert_chunk_invariance, load_chunk
    from processors.jet_moments import JetMomentsProcessor

    assert_chunk_invariance(JetMomentsProcessor(), load_chunk(TTBAR, entry_stop=60), splits=(2,))


def _raw_awkward_hint() -> None:
    pt = ak.Array([[30.0, 40.0], [50.0]])
    with pytest.raises(TypeError, match=r"stats\.from_awkward\(events\.Jet\.pt\)") as info:
        stats.derive(lambda p: {"m": stats.moments(pt * p["a"])}, {"a": 1.0})
    assert "\n" not in str(info.value)
    # the pointer works: the same through stats.from_awkward
    d = stats.derive(lambda p: {"m": stats.moments(stats.from_awkward(pt).values * p["a"])},
                     {"a": 2.0})
    assert float(d.value["m"].sumw) == 3.0


def test_raw_awkward_times_a_parameter_gets_a_hint() -> None:
    # awkward's JAX backend is process state, and awkward's error differs once it is
    # registered (by the awkward drop-ins, in any earlier test or in a user's program):
    # registered here, whatever ran before; unregistered in a fresh process below.
    from analysis.stats._shadow import jax_backend

    assert jax_backend()
    _raw_awkward_hint()


def test_raw_awkward_hint_without_awkwards_jax_backend() -> None:
    code = (
        "import awkward as ak\n"
        "from tests.cli.test_papercuts import _raw_awkward_hint\n"
        "assert ak.jax._registration_state == ak.jax._RegistrationState.INIT\n"
        "_raw_awkward_hint()\n"
        "assert ak.jax._registration_state == ak.jax._RegistrationState.INIT\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


# --- units ---------------------------------------------------------------------------


def test_units_from_fields_and_from_the_config() -> None:
    u = units_of(load_config(CONFIGS / "agc_ttbar_optimize.yaml"))
    assert u == {"jet_pt_min": "GeV", "btag_min": "", "lep_pt_min": "GeV", "min_jets": "",
                 "ht": "GeV", "m3j": "GeV", "lead_jet_pt": "GeV"}
    data = analysis_config()
    data["parameters"]["jet_abs_eta_max"]["unit"] = "rad?"
    data["observables"][0]["unit"] = "TeV"
    u = units_of(config_from_dict(data))
    assert u["jet_abs_eta_max"] == "rad?" and u[data["observables"][0]["name"]] == "TeV"
    assert u["jet_pt_min"] == "GeV"


# --- plots ---------------------------------------------------------------------------


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions save (not written to disk)."""
    saved = []
    # the plots' one writer (atomic, fault-reported): record instead of writing
    monkeypatch.setattr("analysis.cli.historyplots._save",
                        lambda fig, path: saved.append((Path(path).name, fig)))
    return saved


def _report() -> dict:
    names = ["jet_pt_min", "btag_min"]
    history = [
        {"step": k, "objective": -z, "significance": z,
         "parameters": {"jet_pt_min": 20.0 + 3 * k, "btag_min": max(0.5 - 0.2 * k, 0.0)}}
        for k, z in enumerate([1.0, 2.0, 2.5])
    ]
    return {
        "trainable": names, "history": history,
        "bounds": {"jet_pt_min": [15.0, 120.0], "btag_min": [0.0, 0.95]},
        "units": {"jet_pt_min": "GeV", "btag_min": ""},
        "final": {"hard": {"parameters": {"jet_pt_min": 26.0, "btag_min": 0.1}}},
        "status": {"converged": False, "steps_run": 3,
                   "hard_significance": {"initial": 0.9, "final": 2.4},
                   "hard_objective": {"initial": -0.9, "final": -2.4}},
    }


def test_history_plots(figures, tmp_path) -> None:
    from analysis.cli.plots import plot_history

    plot_history(_report(), tmp_path)
    (name1, obj), (name2, par) = figures
    assert (name1, name2) == ("objective.png", "parameters.png")
    ax = obj.axes[0]
    assert len(obj.axes) == 1  # one curve, no mirrored twin axis
    assert "significance" in ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["soft cuts (annealed widths)", "hard cuts, initial", "hard cuts, final"]
    assert ax.get_legend() is not None and all(h.get_visible() for h in ax.get_lines())
    pt, btag = par.axes[:2]
    assert pt.get_ylabel() == "jet_pt_min [GeV]" and btag.get_ylabel() == "btag_min"
    lo, hi = pt.get_ylim()
    assert lo < 15.0 and hi > 120.0  # the bounds in view, outside shaded
    stars = [ln for ln in pt.get_lines() if ln.get_marker() == "*"]
    assert len(stars) == 1 and stars[0].get_ydata()[0] == 26.0  # the final hard value


def test_histogram_errors_from_sumw2_none_on_empty_bins(monkeypatch) -> None:
    import mplhep

    from analysis.cli import plots

    h = hist.Hist(hist.axis.Regular(4, 0, 4), storage=hist.storage.Weight())
    h.fill([0.5, 0.5, 2.5], weight=[1e5, 2e5, 3e5])  # weighted MC, bins 1 and 3 empty
    seen = {}
    monkeypatch.setattr(mplhep, "histplot", lambda values, edges, yerr, **kw: seen.update(yerr=yerr))
    plots._draw(None, h, "x", "C0")
    np.testing.assert_allclose(seen["yerr"], [np.sqrt(1e10 + 4e10), 0.0, 3e5, 0.0])


def test_configs_load_with_units(tmp_path) -> None:
    data = yaml.safe_load((CONFIGS / "ttbar.yaml").read_text())
    data["observables"][0]["unit"] = 3  # not a string
    with pytest.raises(ConfigError, match=r"observables\.0\.unit"):
        config_from_dict(data)


def test_scan_prints_its_best_point_in_table_digits() -> None:
    from analysis.cli.statuslines import _best_line

    best = {"parameters": {"jet_pt_min": 30.0, "btag_min": 0.123456}, "objective": -3.14159,
            "significance": 3.14159}
    assert _best_line(best) == (
        "best: jet_pt_min = 30.00, btag_min = 0.1235: objective -3.142 (significance 3.142)"
    )
    assert _best_line(None) == "no grid point has a defined objective"
