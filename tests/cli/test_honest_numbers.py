"""Honest numbers and plots: the luminosity in the unit that reads best; hist_<dataset>.png
compares hard cuts with hard cuts; an empty sample is in no stack legend; linear_fit's
errors in the evaluate table say which weights they assume.

References: the unit conversions by hand (1 nb^-1 = 1e-3 pb^-1); the histogram requests
the plot makes; the samples' contents.
"""

from __future__ import annotations

from types import SimpleNamespace

import hist
import numpy as np
import pytest

from analysis.cli import plots
from analysis.cli.lkplots import template_data
from analysis.cli.report import fit_error_note, print_summary
from analysis.cli.units import lumi_label


@pytest.mark.parametrize("pb, text", [(0.0075, "7.5 nb$^{-1}$"), (0.01, "10 nb$^{-1}$"),
                                      (10.0, "10 pb$^{-1}$"), (140000.0, "140 fb$^{-1}$"),
                                      (1.0, "1 pb$^{-1}$")])
def test_lumi_in_the_unit_that_reads_best(pb, text):
    assert lumi_label(pb) == text
    assert "0.0075" not in plots.lumi_text(0.0075) and "7.5 nb" in plots.lumi_text(0.0075)


def _hist(values, edges=(0.0, 10.0, 20.0)):
    h = hist.Hist(hist.axis.Variable(list(edges)), storage=hist.storage.Weight())
    h.view().value = np.asarray(values, dtype=np.float64)
    h.view().variance = np.asarray(values, dtype=np.float64)
    return h


def test_the_histograms_compare_hard_with_hard(monkeypatch):
    asked = []

    def fill(requests):
        asked.extend(requests)
        return [{"ttbar": _hist([1.0, 2.0])} for _ in requests]

    monkeypatch.setattr(plots, "histogram_range", lambda *a, **k: (2, 0.0, 20.0))
    monkeypatch.setattr(plots, "entries_noun", lambda plan, i: "events")
    obs = SimpleNamespace(name="jet_pt", x="Jet.pt", y=None, hist={"bins": 2}, unit=None)
    config = SimpleNamespace(observables=[obs], lumi=0.0075,
                             datasets={"ttbar": SimpleNamespace(weight="genWeight", role="signal")})
    ev = SimpleNamespace(fill_histograms=fill, plan=None)
    plots.histogram_data(ev, config, {"a": 1.0}, np.array([5.0, 0.1]), {"a": 2.0})
    assert len(asked) == 2
    for request in asked:  # the initial selection too: width 0
        assert np.all(np.asarray(request["widths"]) == 0.0)


def test_empty_samples_are_in_no_legend():
    config = SimpleNamespace(datasets={"ttbar": SimpleNamespace(role="signal"),
                                       "dy": SimpleNamespace(role="background"),
                                       "wjets": SimpleNamespace(role="background")})
    d = plots.overlay_data({"ttbar": _hist([1.0, 2.0]), "dy": _hist([0.0, 0.0]),
                            "wjets": _hist([1.0, 1.0])}, config, {"ttbar": 1, "dy": 1, "wjets": 1})
    assert list(d["backgrounds"]) == ["wjets"]
    empty = {"sumw": [0.0, 0.0], "sumw2": [0.0, 0.0]}
    full = {"sumw": [1.0, 2.0], "sumw2": [1.0, 2.0]}
    section = {"signal": ["ttbar"], "mc_stat": True, "channels": {"sr": {
        "edges": [0.0, 10.0, 20.0], "samples": {
            "ttbar": {"nominal": full, "variations": {}},
            "dy": {"nominal": empty, "variations": {}},
            "wjets": {"nominal": full, "variations": {}}}}}}
    assert list(template_data(section, "sr")["backgrounds"]) == ["wjets"]


def test_linear_fit_errors_say_which_weights_they_assume(tmp_path, capsys):
    entry = {"value": 1.0, "grad": {}}
    report = {"trainable": [], "derivatives": None, "datasets": {"ttbar": {
        "events": 10, "sumw": 10.0, "selected_sumw": 5.0, "selected_sumw_grad": None,
        "selected_sumw2": 5.0, "selected_sumw2_grad": None, "effective_events": 5.0,
        "observables": {"jet_pt_eta": {"linear_fit": {
            "intercept": entry, "slope": entry, "intercept_error": entry,
            "slope_error": entry}}}}}}
    print_summary(report, tmp_path / "results.json")
    out = capsys.readouterr().out
    assert "slope_error" in out
    note = fit_error_note(report)
    assert note and "w = 1/sigma^2" in note and "note: linear_fit" in out
    assert fit_error_note({"datasets": {}}) is None
