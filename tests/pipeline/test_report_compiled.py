"""The per-dataset report's derivatives run as one compiled program per plan
(:func:`analysis.pipeline.results.dataset_report`): a new process loads one program
from the persistent cache instead of some thirty eager operations (issue 35), with the
values of the eager computation (to 1e-14 relative: XLA fuses the operations)."""

from __future__ import annotations

import jax
import numpy as np

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.pipeline import results
from analysis.pipeline.plan import build_plan
from tests.conftest import SHARED_DATA

DY = str(SHARED_DATA / "nano_dy.root")


def test_report_derivatives_are_compiled_once_and_equal_the_eager_ones():
    cfg = config_from_dict({
        "datasets": {"dy": {"files": [DY], "weight": "genWeight"}},
        "parameters": {"pt_min": {"init": 25.0, "bounds": [10.0, 60.0]}},
        "objects": {"jets": {"collection": "Jet",
                             "cuts": [{"var": "pt", "op": ">", "param": "pt_min",
                                       "width": 5.0}]}},
        "selection": [{"count": "jets", "op": ">=", "value": 1}],
        "observables": [{"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]}],
    })
    plan = build_plan(cfg)
    with Evaluator(cfg) as evaluator:
        state = evaluator.run({}, order=1)["dy"]
    results._report_derivatives.cache_clear()
    report = results.dataset_report(state, plan, order=1)
    again = results.dataset_report(state, plan, order=1)
    info = results._report_derivatives.cache_info()
    assert (info.misses, info.hits) == (1, 1)  # one program for the plan, reused
    assert again == report
    # the reference: the same derivatives eagerly (jax.disable_jit)
    values, jacs, hesses = state.taylor()
    with jax.disable_jit():
        val, grad, _ = results.derivatives(lambda s: results.statistics(s, plan),
                                           values, jacs, hesses, order=1)
    ht = report["observables"]["ht"]
    for stat in ("mean", "std"):
        ref = float(val["observables"]["ht"][stat])
        assert ref != 0
        np.testing.assert_allclose(ht[stat]["value"], ref, rtol=1e-14)
        np.testing.assert_allclose(ht[stat]["grad"]["pt_min"],
                                   float(np.asarray(grad["observables"]["ht"][stat])[0]),
                                   rtol=1e-14)
    np.testing.assert_allclose(report["selected_sumw"], float(val["selected_sumw"]), rtol=1e-14)
