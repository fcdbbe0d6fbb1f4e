"""The plot workers (analysis.cli.plotworker): a figure drawn in a worker process is the
same PNG, byte for byte, as drawn in this process; a job's error reaches the parent as
the same one line; only the plot modules' functions run there."""

from __future__ import annotations

import hist
import numpy as np
import pytest

from analysis.cli import plots
from analysis.cli.plotworker import PlotWorkers
from analysis.data.atomic import WriteError


def _report() -> dict:
    history = [{"step": k, "objective": -z, "significance": z,
                "parameters": {"jet_pt_min": 20.0 + 3 * k, "btag_min": 0.5 - 0.1 * k}}
               for k, z in enumerate([1.0, 2.0, 2.5])]
    return {"trainable": ["jet_pt_min", "btag_min"], "history": history,
            "bounds": {"jet_pt_min": [15.0, 120.0], "btag_min": [0.0, 0.95]},
            "units": {"jet_pt_min": "GeV", "btag_min": ""},
            "final": {"hard": {"parameters": {"jet_pt_min": 26.0, "btag_min": 0.3}}},
            "status": {"converged": True, "steps_run": 3,
                       "hard_significance": {"initial": 0.9, "final": 2.4}}}


def _data() -> dict:
    rng = np.random.default_rng(1)
    out = {}
    for ds in ("ttbar", "dy"):
        h = {k: hist.Hist(hist.axis.Regular(20, 0, 200), storage=hist.storage.Weight())
             for k in ("before", "after")}
        h["before"].fill(rng.exponential(50, 500), weight=rng.uniform(0.5, 1.5, 500))
        h["after"].fill(rng.exponential(70, 100), weight=rng.uniform(0.5, 1.5, 100))
        out[ds] = {**h, "norm": 0.01, "weighted": True}
    return {"datasets": out, "xlabel": "jet_pt [GeV]", "per_bin": "10 GeV", "noun": "jets",
            "legend_title": "jet_pt = Jet.pt", "lumi": 0.0075, "overlay": None}


def test_worker_figures_are_the_same_bytes_and_errors_the_same_line(tmp_path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    data = _data()
    plots.plot_history(_report(), here)
    plots.draw_histogram(data, "dy", here)
    blocked = tmp_path / "blocked"
    (blocked / "objective.png").mkdir(parents=True)  # a directory where the file goes
    with pytest.raises(WriteError) as local:
        plots.plot_history(_report(), blocked)
    with PlotWorkers(1) as workers:
        assert len(workers._procs) == 1  # a process, not the fallback
        workers.submit("analysis.cli.plots.plot_history", _report(), there, cost=2.0)
        workers.submit("analysis.cli.plots.draw_histogram", data, "dy", there)
        paths = workers.wait()
        assert paths == [[there / "objective.png", there / "parameters.png"],
                         there / "hist_dy.png"]
        for name in ("objective.png", "parameters.png", "hist_dy.png"):
            assert (there / name).read_bytes() == (here / name).read_bytes(), name
        workers.submit("analysis.cli.plots.plot_history", _report(), blocked)
        with pytest.raises(WriteError) as remote:
            workers.wait()
        assert str(remote.value) == str(local.value)
        assert len(str(remote.value).splitlines()) == 1
        workers.submit("os.system", "true")  # only the plot modules' functions
        with pytest.raises(ValueError, match="not a function of analysis.cli.plots"):
            workers.wait()
        workers.submit("analysis.cli.plots.draw_overlay", data, there)  # still serving
        assert workers.wait() == [None]


def test_without_workers_the_jobs_run_here(tmp_path) -> None:
    with PlotWorkers(0) as workers:
        workers.submit("analysis.cli.plots.draw_histogram", _data(), "ttbar", tmp_path)
        assert (tmp_path / "hist_ttbar.png").exists()  # drawn when submitted
        assert workers.wait() == [tmp_path / "hist_ttbar.png"]


def _numbers(report: dict) -> dict:
    """results.json without the steps' wall times."""
    return {**report, "history": [{k: v for k, v in h.items() if k != "wall_time_s"}
                                  for h in report["history"]]}


def test_optimize_draws_while_it_reports_and_reports_the_same(small_data, tmp_path) -> None:
    """``optimize`` submits the parameter plot and the histograms once keep-best has
    chosen the final point (before the final evaluations), the objective plot before its
    count pass (docs/explanation/performance.md): the figures are those of its
    results.json, and results.json is the same with plots as without (the histograms'
    pass over every event, between keep-best and the final soft pass on the training
    part, changes none of the passes' results)."""
    import json

    from analysis.cli.parser import main
    from tests import opt_helpers as H
    from tests.conftest import write_config

    cfg = H.config_dict(small_data, optimizer={"steps": 3, "validation": {"fraction": 0.3}})
    cfg["observables"][0]["hist"] = {"bins": 20, "range": [0, 300]}
    path = write_config(tmp_path / "opt.yaml", cfg)
    plotted, bare = tmp_path / "plots", tmp_path / "bare"
    assert main(["optimize", str(path), "-o", str(plotted), "--quiet"]) == 0
    assert main(["optimize", str(path), "-o", str(bare), "--quiet", "--no-plots"]) == 0
    report = json.loads((plotted / "results.json").read_text())
    assert _numbers(report) == _numbers(json.loads((bare / "results.json").read_text()))
    assert {p.name for p in plotted.glob("*.png")} == {
        "objective.png", "parameters.png", "hist_ttbar.png", "hist_dy.png",
        "signal_background.png"}
    here = tmp_path / "here"
    assert plots.plot_history(report, here) == [here / "objective.png", here / "parameters.png"]
    for name in ("objective.png", "parameters.png"):
        assert (here / name).read_bytes() == (plotted / name).read_bytes(), name


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux: /proc)."""
    import os

    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs /proc")
def test_one_process_started_the_others_forked_after_its_imports(tmp_path) -> None:
    """Two workers: one process started (matplotlib imported once), the second forked
    from it; each draws the same bytes as this process; closing ends both, and so does
    killing (an error in the command): the forked one reaped, not left a zombie."""
    import os
    import time

    here, there = tmp_path / "here", tmp_path / "there"
    data = _data()
    plots.draw_histogram(data, "dy", here)
    plots.draw_histogram(data, "ttbar", here)
    for kill in (False, True):
        workers = PlotWorkers(2)
        assert len(workers._procs) == 2
        started = workers._procs[0].proc
        assert started is not None and workers._procs[1].proc is None
        workers.submit("analysis.cli.plots.draw_histogram", data, "dy", there)  # worker 0
        workers.submit("analysis.cli.plots.draw_histogram", data, "ttbar", there)  # worker 1
        assert workers._jobs == [(0, 0), (1, 0)]
        assert workers.wait() == [there / "hist_dy.png", there / "hist_ttbar.png"]
        for name in ("hist_dy.png", "hist_ttbar.png"):
            assert (there / name).read_bytes() == (here / name).read_bytes(), name
        forked = _children(started.pid)
        assert len(forked) == 1, forked  # the second worker, and no process more
        if kill:  # while both draw
            workers.submit("analysis.cli.plots.draw_overlay", data, there, cost=2.0)
            workers.submit("analysis.cli.plots.draw_overlay", data, there)
        workers.close(kill=kill)
        assert started.poll() is not None
        for _ in range(100):  # gone: reaped by the started one (no zombie left to init)
            if not os.path.exists(f"/proc/{forked[0]}"):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"forked worker {forked[0]} left (kill={kill})")
