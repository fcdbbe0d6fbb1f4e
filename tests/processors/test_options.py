"""The hand-written processors refuse unknown and non-finite options in one line (issue 54)."""

from __future__ import annotations

import math

import pytest

from processors.dimuon import DimuonProcessor
from processors.jet_moments import JetMomentsProcessor


@pytest.mark.parametrize("make, match", [
    (lambda: JetMomentsProcessor({"nope": 1}), "theta: unknown parameter 'nope'"),
    (lambda: JetMomentsProcessor({"jet_pt_min": math.nan}), r"theta\['jet_pt_min'\]: expected a finite"),
    (lambda: JetMomentsProcessor(widths={"jet_pt_mn": 1.0}), "widths: unknown parameter"),
    (lambda: JetMomentsProcessor(widths={"jet_pt_min": -1.0}), "expected a number >= 0"),
    (lambda: JetMomentsProcessor(min_jets=2.5), "min_jets: expected an integer"),
    (lambda: JetMomentsProcessor(order=3), "order: expected an integer from 0 to 2"),
    (lambda: DimuonProcessor({"mu_pt_mi": 10.0}), "unknown parameter 'mu_pt_mi'"),
    (lambda: DimuonProcessor({"mu_pt_min": math.inf}), "expected a finite number"),
    (lambda: DimuonProcessor(window=(math.nan, 60)), "window: expected finite numbers with low < high"),
    (lambda: DimuonProcessor(window=(120, 60)), "low < high"),
    (lambda: DimuonProcessor(window=(60, 60)), "low < high"),
    (lambda: DimuonProcessor(window="60-120"), r"window: expected \(low, high\)"),
])
def test_refused_in_one_line(make, match):
    with pytest.raises((ValueError, TypeError), match=match) as err:
        make()
    assert "\n" not in str(err.value)


def test_known_options_kept():
    proc = JetMomentsProcessor({"jet_pt_min": 25}, widths={"jet_abs_eta_max": 0.0}, min_jets=3.0)
    assert proc.theta == {"jet_pt_min": 25, "jet_abs_eta_max": 2.4}
    assert proc.widths["jet_abs_eta_max"] == 0.0 and proc.min_jets == 3
    assert DimuonProcessor(window=(70, 110)).window == (70.0, 110.0)
