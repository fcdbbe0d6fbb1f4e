"""The plan asks for the moment order a statistic declares in the registry, not for one
decided by its name.

A statistic registered in the test (the third central moment ``M3 / W``, ``order=3``,
a name no module knows) must get its third moments through the object-set pipeline:
an event sum (``sum(jets.pt)``), whose moments are computed only up to the plan's
order, against numpy on the DY file read with uproot/awkward at width 0. Before the
registry declared orders, the plan gave order 4 only to ``skew``/``kurtosis`` by name
and this statistic was NaN; declaring ``order=2`` for it shows the declaration is what
is read (NaN, as documented).
"""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.pipeline.plan import build_plan
from analysis.pipeline.results import dataset_report
from analysis.spec import statistics as registry
from analysis.stats import _core
from tests.conftest import SHARED_DATA

DY = str(SHARED_DATA / "nano_dy.root")


def config() -> dict:
    return {
        "datasets": {"dy": {"files": [DY], "weight": "genWeight"}},
        "objects": {"jets": {"collection": "Jet",
                             "cuts": [{"var": "pt", "op": ">", "value": 20.0}]}},
        "selection": [{"count": "jets", "op": ">=", "value": 1}],
        "observables": [{"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "third"]}],
    }


def reference() -> tuple[float, float]:
    """``(W, M3 / W)`` of HT over events with a jet above 20 GeV, weighted by genWeight."""
    a = uproot.open(DY)["Events"].arrays(["Jet_pt", "genWeight"])
    pt = a["Jet_pt"][a["Jet_pt"] > 20.0]
    keep = ak.num(pt) >= 1
    x = np.asarray(ak.sum(pt, axis=1)[keep], dtype=np.float64)
    w = np.asarray(a["genWeight"][keep], dtype=np.float64)
    mu = np.sum(w * x) / np.sum(w)
    return float(np.sum(w)), float(np.sum(w * (x - mu) ** 3) / np.sum(w))


@pytest.mark.parametrize("order", [3, 2])
def test_a_registered_statistic_gets_the_order_it_declares(monkeypatch, order):
    third = registry.Statistic("third", 1, lambda s: _core.safe_div(s.m3, s.sumw), order=order)
    monkeypatch.setitem(registry.STATISTICS, "third", third)
    cfg = config_from_dict(config())
    plan = build_plan(cfg)
    assert plan.observables[0].univariate == ("mean", "third")
    assert plan.sets.orders == (max(2, order),)
    with Evaluator(cfg) as evaluator:
        state = evaluator.run({}, order=0)["dy"]
    value = dataset_report(state, plan, order=0)["observables"]["ht"]["third"]["value"]
    sumw, m3 = reference()
    np.testing.assert_allclose(float(state.derived.value["observables"]["ht"]["moments"].sumw),
                               sumw, rtol=1e-12)
    if order == 3:
        assert m3 != 0
        np.testing.assert_allclose(value, m3, rtol=1e-9)
    else:  # declared too low: M3 is not computed (NaN, never a wrong number)
        assert value is None or np.isnan(value)


def test_every_shipped_statistic_declares_an_order():
    for stat in registry.STATISTICS.values():
        assert 1 <= stat.order <= 4, stat.name
    assert registry.moment_order(["mean"]) == 1
    assert registry.moment_order(["mean", "kurtosis", "var"]) == 4
    assert registry.moment_order([]) == 0
