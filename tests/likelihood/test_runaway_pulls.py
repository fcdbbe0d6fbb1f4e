"""A mu = 0 fit that pulls nuisances far (a signal several times the background, as at a
luminosity of 1/pb on the real files): results.json's ``fit.large_pulls`` names every
nuisance beyond 3 sigma, the console prints one line naming them, and the exported
pyhf workspace widens pyhf's default bounds (+-5) so that pyhf's Z is ours.

Reference: pyhf's own q0 on the written workspace (scipy, tolerance 1e-14), which with
its default bounds disagrees (the nuisance pulled to +12 stops at +5).
"""

from __future__ import annotations

import math

import pyhf
import pytest

from analysis import likelihood as lk
from analysis.cli.report import pull_warning
from tests.likelihood.test_pyhf import random_case


def pyhf_z(spec: dict) -> float:
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer(tolerance=1e-14))
    ws = pyhf.Workspace(spec)
    m = ws.model(modifier_settings={"normsys": {"interpcode": "code1"},
                                    "histosys": {"interpcode": "code4p"}})
    c = m.config
    q0 = pyhf.infer.test_statistics.q0(0.0, ws.data(m), m, c.suggested_init(),
                                       c.suggested_bounds(), c.suggested_fixed())
    return math.sqrt(float(q0))


@pytest.fixture(scope="module")
def runaway():
    states, model = random_case(7, channels=("sr",), nbins=3, signal=(200.0, 400.0), bump=0.0)
    result = lk.significance(states, model)
    lk.raise_for_fit(result.fit, step="test")
    return float(result.z), lk.results_section(states, model, result)


def test_large_pulls_are_flagged_and_named(runaway):
    _, section = runaway
    fit = section["fit"]
    over = {n for n, v in fit["nuisances"].items() if abs(v) > 3.0}
    assert over and set(fit["large_pulls"]) == over
    assert fit["large_pulls"]["dy_norm"] > 10.0
    line = pull_warning(section)
    assert line and "\n" not in line and "dy_norm +11.9" in line


def test_no_flag_at_normal_pulls():
    states, model = random_case(7, channels=("sr",), nbins=3)
    section = lk.results_section(states, model, lk.significance(states, model))
    assert section["fit"]["large_pulls"] == {} and pull_warning(section) is None
    assert lk.pyhf_workspace(section)["measurements"][0]["config"]["parameters"] == []


def test_exported_workspace_reproduces_our_z(runaway):
    z, section = runaway
    spec = lk.pyhf_workspace(section)
    bounds = {p["name"]: p["bounds"] for p in spec["measurements"][0]["config"]["parameters"]}
    assert bounds["dy_norm"] == [[-25.0, 25.0]]
    pyhf.Workspace(spec)  # valid against pyhf's schema
    assert pyhf_z(spec) == pytest.approx(z, rel=1e-7)
    spec["measurements"][0]["config"]["parameters"] = []  # pyhf's defaults: the stop at 5
    assert abs(pyhf_z(spec) / z - 1) > 1e-3
