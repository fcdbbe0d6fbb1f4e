"""What signal_background.png and hist_<dataset>.png draw (matplotlib artists and
plot data, not pixels): expected events (norm x sum of weights) per bin width,
backgrounds stacked smallest first, the signal named and drawn on top of the stack,
per-object observables counted in objects."""

from __future__ import annotations

from types import SimpleNamespace

import hist
import numpy as np
import pytest

from analysis.cli.plots import entries_noun, overlay_data, overlay_figure
from analysis.config.loader import config_from_dict
from analysis.pipeline.plan import build_plan


def _hist(values, edges):
    h = hist.Hist(hist.axis.Variable(edges), storage=hist.storage.Weight())
    h.view().value = np.asarray(values, dtype=np.float64)
    h.view().variance = np.asarray(values, dtype=np.float64)
    return h


CONFIG = SimpleNamespace(datasets={"ttbar": SimpleNamespace(role="signal"),
                                   "dy": SimpleNamespace(role="background"),
                                   "wjets": SimpleNamespace(role="background")})
NORMS = {"ttbar": 0.5, "dy": 2.0, "wjets": 0.1}


def _hists(edges):
    return {"ttbar": _hist([4.0, 8.0, 2.0], edges), "dy": _hist([10.0, 5.0, 1.0], edges),
            "wjets": _hist([1.0, 3.0, 2.0], edges)}


def test_uniform_bins_expected_events_per_bin_width():
    d = overlay_data(_hists([0.0, 10.0, 20.0, 30.0]), CONFIG, NORMS, unit="GeV")
    assert d["ylabel"] == "expected events / 10 GeV"
    assert list(d["backgrounds"]) == ["wjets", "dy"]  # smallest first: on the bottom
    assert d["backgrounds"]["dy"] == pytest.approx([20.0, 10.0, 2.0])  # norm x sumw
    assert d["signal"]["ttbar"] == pytest.approx([2.0, 4.0, 1.0])
    assert d["signal_label"].startswith("ttbar (signal)")


def test_variable_bins_per_unit_of_x_and_objects_named():
    d = overlay_data(_hists([0.0, 10.0, 30.0, 70.0]), CONFIG, NORMS, unit="GeV",
                     noun="jets")
    assert d["ylabel"] == "expected jets / GeV"
    assert d["signal"]["ttbar"] == pytest.approx([2.0 / 10, 4.0 / 20, 1.0 / 40])


def test_figure_stacks_backgrounds_and_draws_the_signal_on_top():
    edges = [0.0, 10.0, 20.0, 30.0]
    before = overlay_data(_hists(edges), CONFIG, NORMS, unit="GeV")
    after = overlay_data({k: _hist(np.asarray(h.values()) / 4, edges)
                          for k, h in _hists(edges).items()}, CONFIG, NORMS, unit="GeV")
    fig = overlay_figure(before, after, xlabel="jet_pt [GeV]", lumi=0.02)
    try:
        for ax, d in zip(fig.axes, (before, after)):
            assert ax.get_xlabel() == "jet_pt [GeV]"
            assert ax.get_ylabel() == "expected events / 10 GeV"
            _, labels = ax.get_legend_handles_labels()
            assert {"wjets", "dy"} <= set(labels)
            assert any(lab.startswith("ttbar (signal) on the background") for lab in labels)
            steps = {p.get_label(): p.get_data() for p in ax.patches
                     if hasattr(p, "get_data")}
            wj, dy = d["backgrounds"]["wjets"], d["backgrounds"]["dy"]
            # stacked: wjets from 0, dy on top of it
            np.testing.assert_allclose(steps["wjets"].values, wj)
            np.testing.assert_allclose(steps["dy"].values, wj + dy)
            np.testing.assert_allclose(steps["dy"].baseline, wj)
            # the red line is the stack's top: backgrounds + signal, per bin
            sig = next(v for k, v in steps.items() if k.startswith("ttbar"))
            np.testing.assert_allclose(sig.values, wj + dy + d["signal"]["ttbar"])
        assert "20 nb" in fig.axes[0].get_title(loc="right")  # 0.02 pb^-1 in the unit that reads best
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_per_object_observables_count_objects(tmp_path):
    cfg = {"datasets": {"a": {"files": [str(tmp_path / "x.root")]}},
           "parameters": {"p": {"init": 20.0, "bounds": [10.0, 40.0]}},
           "objects": {"jets": {"collection": "Jet", "cuts": [
               {"var": "pt", "op": ">", "param": "p", "width": 1.0}]}},
           "observables": [{"name": "jet_pt", "x": "jets.pt", "stats": ["mean"]},
                           {"name": "lead", "x": "jets[0].pt", "stats": ["mean"]},
                           {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean"]}],
           "objective": {"terms": [{"type": "target", "stat": "a.jet_pt.mean",
                                    "value": 50.0}]}}
    plan = build_plan(config_from_dict(cfg))
    assert [entries_noun(plan, i) for i in range(3)] == ["jets", "events", "events"]
    # a histogram's expression (templates_CH.png)
    assert entries_noun(plan, "jets.pt") == "jets"
    assert entries_noun(plan, "sum(jets.pt)") == "events"
    assert entries_noun(plan, "MET.pt") == "events"
