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
