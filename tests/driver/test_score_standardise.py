"""A learned score's inputs standardised from a first pass: the event-weighted mean and
std over every jet (object-level) or event (event-level), before any cut, against numpy."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from analysis.config.loader import config_from_dict
from analysis.driver.standardise import standardise_scores
from analysis.pipeline.plan import build_plan
from tests.pipeline.test_score_kernel import PATH, config


def _mean_std(x, w):
    mu = np.sum(w * x) / np.sum(w)
    return mu, np.sqrt(np.sum(w * (x - mu) ** 2) / np.sum(w))


@pytest.mark.slow
def test_standardisation_from_the_first_pass() -> None:
    data = config()
    for s in data["scores"]:
        del s["standardise"]
    cfg = config_from_dict(data)
    standardise_scores(cfg)
    a = ak.values_astype(uproot.open(PATH)["Events"].arrays(
        ["genWeight", "Jet_eta", "MET_pt"]), np.float64)
    w = np.asarray(a.genWeight)
    wj = np.repeat(w, np.asarray(ak.num(a.Jet_eta)))
    mu, sd = _mean_std(np.abs(ak.to_numpy(ak.flatten(a.Jet_eta))), wj)
    tag = cfg.scores[0].standardise
    np.testing.assert_allclose([tag.mean[1], tag.std[1]], [mu, sd], rtol=1e-10)
    mu, sd = _mean_std(np.asarray(a.MET_pt), w)
    ev = cfg.scores[1].standardise
    np.testing.assert_allclose([ev.mean[0], ev.std[0]], [mu, sd], rtol=1e-10)
    plan = build_plan(cfg)  # the plan's constants carry them
    init = cfg.initial_params()
    assert init["score.ev.mean[0]"] == ev.mean[0]
    assert plan.param_names.index("score.ev.std[1]") < len(plan.param_names)
