"""results.json's ``histograms.NAME.datasets.DATASET.sumw_grad.PARAM`` (issue 50, item 5):
the derivative of each normalised bin beside ``sumw``, against central differences of
``sumw`` itself, with soft bins on one histogram (an entry's bin moves with the cut on
the jets it ranks) and hard bins on the other."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.optimize.lksection import histograms_section
from tests.conftest import central_difference
from tests.likelihood.test_yaml_pipeline import PARAMS, lk_config


@pytest.mark.slow  # two compilations (order 1 and 0) on the small data set, ~60-120 s
def test_sumw_grad_equals_central_differences(small_data) -> None:
    cfg = lk_config(small_data)
    cfg["histograms"][0]["width"] = 10.0  # lead: soft bins
    names = list(PARAMS)
    with Evaluator(config_from_dict(cfg)) as ev:
        sec = histograms_section(ev.config, ev.plan, ev.run(PARAMS, order=1))

        def sumw(x):
            params = dict(zip(names, map(float, x)))
            s = histograms_section(ev.config, ev.plan, ev.run(params, order=0))
            assert all("sumw_grad" not in d for h in s.values() for d in h["datasets"].values())
            return np.array([s[h]["datasets"][ds]["sumw"] for h in ("lead", "bpt")
                             for ds in ("ttbar", "dy")])

        fd = np.asarray(central_difference(sumw, [PARAMS[n] for n in names], [0.05, 1e-4]))
    got = np.array([[sec[h]["datasets"][ds]["sumw_grad"][n] for h in ("lead", "bpt")
                     for ds in ("ttbar", "dy")] for n in names])  # (P, 4, bins)
    fd = np.moveaxis(fd.reshape((4, -1, len(names))), -1, 0)
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-7 * np.abs(got).max())
    assert np.abs(got).max() > 0
    for h in ("lead", "bpt"):
        d = sec[h]["datasets"]["ttbar"]
        assert set(d["sumw_grad"]) == set(names) and len(d["sumw_grad"]["btag_min"]) == 4


@pytest.mark.slow  # two compilations on the small data set, ~1-3 min
def test_z_gradient_in_trainable_edges_equals_central_differences(small_data) -> None:
    """dZ/d(edge) of the discovery significance (soft bins, trainable edges on the
    channel b1's histogram ``lead``), against central differences of Z."""
    from analysis.optimize.lksection import likelihood_section

    cfg = lk_config(small_data)
    cfg["histograms"][0].update(width=15.0, trainable_edges=True)  # lead: 20, 60, ..., 400
    keys = ["lead.edges[1]", "lead.edges[2]", "lead.edges[3]"]
    at = dict(PARAMS, **dict(zip(keys, [55.0, 110.0, 170.0])))
    with Evaluator(config_from_dict(cfg)) as ev:
        grad = likelihood_section(ev.config, ev.plan, ev.run(at, order=1))["significance"]["grad"]

        def z(x):
            params = dict(at, **dict(zip(keys, map(float, x))))
            sec = likelihood_section(ev.config, ev.plan, ev.run(params, order=0))
            return sec["significance"]["value"]

        fd = np.asarray(central_difference(z, [at[k] for k in keys], 0.05))
    got = np.array([grad[k] for k in keys])
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-9)
    assert np.all(np.abs(got) > 1e-6)
