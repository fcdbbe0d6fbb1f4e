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


def test_pulls_figure_draws_post_fit_uncertainties_and_names_the_fit():
    import matplotlib.pyplot as plt

    from analysis.cli.lkplots import pulls_figure
    from analysis.likelihood.summary import FIT_DESCRIPTION

    sec = {**_section([0.0, 50.0, 100.0]),
           "fit": {"converged": True, "nuisances": {"dy_norm": 1.7, "jes": -0.2},
                   "uncertainties": {"dy_norm": 0.6, "jes": 0.95},
                   "description": FIT_DESCRIPTION}}
    fig = pulls_figure(sec)
    try:
        ax = fig.axes[0]
        bars = ax.containers[0]  # the ErrorbarContainer
        points, _, (xbars,) = bars.lines[0], bars.lines[1], bars.lines[2]
        assert list(points.get_xdata()) == pytest.approx([1.7, -0.2])
        spans = [seg[:, 0] for seg in xbars.get_segments()]
        assert [tuple(s) for s in spans] == [pytest.approx((1.1, 2.3)),
                                             pytest.approx((-1.15, 0.75))]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["dy_norm", "jes"]
        text = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
        assert "background-only fit (mu = 0) to Asimov signal + background data" in text
        assert "pulled to absorb the signal" in text
        assert "post-fit" in ax.get_xlabel()
    finally:
        plt.close(fig)


def test_templates_figure_axis_labels():
    import matplotlib.pyplot as plt

    from analysis.cli.lkplots import templates_figure

    fig = templates_figure(_section([0.0, 50.0, 150.0]), "sr", label="lead: jets[0].pt",
                           unit="GeV")
    try:
        ax = fig.axes[0]
        assert ax.get_xlabel() == "lead: jets[0].pt [GeV]"
        assert ax.get_ylabel() == "expected events / GeV"
        steps = {p.get_label(): p.get_data() for p in ax.patches if hasattr(p, "get_data")}
        # the signal line is background + signal per GeV: (2 + 1) / 50, (2 + 2) / 100
        sig = next(v for k, v in steps.items() if k.startswith("ttbar (signal"))
        assert sig.values == pytest.approx([3.0 / 50, 4.0 / 100])
    finally:
        plt.close(fig)


def test_the_expected_limit_is_in_the_title_and_the_table():
    """results.json's ``upper_limit``: in templates_CH.png's title beside Z, and a row of
    the results table (marked where it did not converge)."""
    from analysis.cli.lkplots import _figures_line
    from analysis.cli.report import limit_row

    sec = {**_section([0.0, 1.0, 2.0]), "significance": {"value": 2.5, "grad": {}},
           "upper_limit": {"value": 0.8125, "grad": {"pt": -0.0123}, "level": 0.05,
                           "reliable": True}}
    line = _figures_line(sec)
    assert "Z = 2.5" in line and "0.812" in line and "95% CL" in line, line
    label, cells = limit_row(sec, ["pt"])
    assert label == "expected CLs limit on mu (95% CL)" and len(cells) == 2
    sec["upper_limit"]["reliable"] = False
    label, cells = limit_row(sec, ["pt"])
    assert "UNRELIABLE" in label and all("unreliable" in c for c in cells)
    assert "limit" not in _figures_line({"significance": {"value": 1.0}})
