"""Keep-best's MC uncertainty for a likelihood objective: the bootstrap replicas of
``discovery_significance`` (on main they were not computed, so keep-best took the
highest of the noisy hard-cut points with no winner's-curse rule). Reference: a one-bin
channel holding every selected event, whose replica is exactly the replica's selected
sums (``norm_k s1_k``, ``norm_k^2 s2_k``): Z of that one-bin model, replica by replica."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from analysis import likelihood as lk
from analysis import stats
from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.optimize.bootstrap import bootstrap_uncertainty, bootstrap_values, replicated
from analysis.optimize.objectives import Objective, dataset_norm
from tests.likelihood.test_yaml_pipeline import PARAMS, lk_config

K = 12


def _one_bin(small_data) -> dict:
    cfg = copy.deepcopy(lk_config(small_data))
    cfg["histograms"] = [{"name": "all", "x": "jets[0].pt", "edges": [0.0, 1.0e5]}]
    cfg["systematics"] = [{"name": "bkg", "type": "lnN", "datasets": ["dy"], "kappa": 1.2}]
    cfg["likelihood"] = {"channels": {"sr": {"histogram": "all"}}, "mc_stat": True}
    return cfg


@pytest.fixture(scope="module")
def hard_point(small_data):
    """The objective, the hard-cut states at PARAMS and their replicas' sums."""
    config = config_from_dict(_one_bin(small_data))
    with Evaluator(config) as ev:
        widths = np.zeros(ev.plan.n_widths)
        reps = ev.run_replicas(PARAMS, widths=widths, replicas=K)
        totals = ev.run_replica_totals(None, replicas=K)
        objective = Objective(config, ev.plan)
        plan = ev.plan
    states = {n: r.state for n, r in reps.items()}
    sums = {n: np.vstack([totals[n].part("all"), r.sums]) for n, r in reps.items()}
    return config, plan, objective, states, sums


def test_a_likelihood_objective_is_replicated(hard_point):
    config, _, objective, states, sums = hard_point
    assert replicated(objective) == "templates"
    values = bootstrap_values(objective, states, sums)
    assert values is not None and values.shape == (K,) and np.all(np.isfinite(values))
    sigma = bootstrap_uncertainty(objective, states, sums)
    assert sigma is not None and sigma > 0


def test_a_one_bin_channels_replicas_are_the_bins_bootstrap(hard_point):
    """Each replica's -Z is that of the one-bin model whose bin is the replica's selected
    sums, normalised by the replica's sum of weights: computed from the sums alone."""
    config, _, objective, states, sums = hard_point
    values = bootstrap_values(objective, states, sums)
    model = lk.Model([lk.Channel("sr", "all")], ["ttbar"],
                     [lk.Normalisation("bkg", ["dy"], 1.2)], mc_stat=True)
    for k in range(K):
        one = {}
        for name, (_, sumw_k, s1, s2) in sums.items():
            norm = dataset_norm(config, name, float(sumw_k[k]))
            h = stats.Histogram([0.0, 1.0e5], np.array([0.0, norm * s1[k], 0.0]),
                                np.array([0.0, norm * norm * s2[k], 0.0]))
            one[name] = {"all": h}
        want = -float(lk.discovery_significance(one, model))
        assert values[k] == pytest.approx(want, rel=1e-9), (k, values[k], want)
