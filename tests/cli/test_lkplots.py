"""What templates_CH.png draws (plot data, not pixels): units, the signal's name,
events per bin width on variable bins."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.cli.lkplots import template_data
from analysis.cli.units import expression_unit


def _section(edges):
    n = len(edges) - 1
    nominal = {"sumw": list(np.arange(1.0, n + 1)), "sumw2": [0.0] * n}
    return {"signal": ["ttbar"],
            "channels": {"sr": {"edges": edges, "samples": {
                "ttbar": {"nominal": nominal, "variations": {}},
                "wjets": {"nominal": {**nominal, "sumw": [2.0] * n}, "variations": {}}}}},
            "mc_stat": True}


def test_units_of_indexed_and_summed_fields():
    assert expression_unit("jets[0].pt") == "GeV"
    assert expression_unit("sum(jets.pt)", "ht") == "GeV"
    assert expression_unit("jets[1].eta") == ""
    assert expression_unit("count(jets)") == ""


def test_uniform_bins_per_bin_with_the_width_and_the_signal_named():
    d = template_data(_section([0.0, 50.0, 100.0]), "sr", label="lead: jets[0].pt",
                      unit="GeV")
    assert d["xlabel"] == "lead: jets[0].pt [GeV]"
    assert d["ylabel"] == "expected events per bin (50 GeV)"
    assert "ttbar (signal" in d["signal_label"]
    assert list(d["backgrounds"]) == ["wjets"]
    assert d["total"] == pytest.approx([3.0, 4.0])


def test_variable_bins_per_bin_width():
    d = template_data(_section([0.0, 50.0, 150.0]), "sr", unit="GeV")
    assert d["ylabel"] == "expected events / GeV"
    assert d["total"] == pytest.approx([3.0 / 50, 4.0 / 100])
    assert d["backgrounds"]["wjets"] == pytest.approx([2.0 / 50, 2.0 / 100])
