"""Reverse mode's compiled objective (:func:`analysis.optimize.reverse._cotangent`) takes
the datasets' totals and the MC variance's factor as arguments: one program per
objective and datasets serves samples of other totals (keep-best's training, held-out
and whole samples; the validation split's variance factor), each with its own totals."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from analysis.driver.runner import Evaluator
from analysis.optimize.objectives import Objective, dataset_scales
from analysis.optimize.reverse import _cotangent, reverse_objective
from analysis.pipeline.results import dataset_report
from tests import opt_helpers as H


class _Objective:
    """The part of :class:`analysis.optimize.objectives.Objective` that ``_cotangent`` reads."""

    terms: tuple = ()

    def stats_scaled(self, values, scales):
        return {"v": scales["tt"]["variance"] * values["tt"] ** 2}

    def value(self, stats):
        return stats["v"]


def test_a_new_variance_scale_is_followed_by_the_same_program() -> None:
    objective, values = _Objective(), {"tt": np.float64(3.0)}
    run = _cotangent(objective, ("tt",))
    (val, _), grad = run(values, {"tt": {"variance": 1.0}})
    assert float(val) == 9.0 and float(grad["tt"]) == 6.0
    # the held-out part, same totals
    (val, _), grad = _cotangent(objective, ("tt",))(values, {"tt": {"variance": 0.25}})
    np.testing.assert_allclose([float(val), float(grad["tt"])], [2.25, 1.5], rtol=1e-15)
    assert len(objective._compiled) == 1


class _Sample:
    """An evaluator whose passes' states carry other totals (``factors[dataset]``: the
    sums of weights' and events' factors), as a part of a sample has."""

    def __init__(self, ev: Evaluator, factors: dict[str, tuple[float, float]]) -> None:
        self._ev, self._factors = ev, factors

    def __getattr__(self, name: str):
        return getattr(self._ev, name)

    def _scaled(self, states: dict) -> dict:
        out = {}
        for name, st in states.items():
            f, g = self._factors[name]
            out[name] = copy.copy(st)
            out[name].sumw, out[name].events = st.sumw * f, max(1, int(st.events * g))
        return out

    def run(self, *args, **kwargs) -> dict:
        return self._scaled(self._ev.run(*args, **kwargs))

    def run_yield_gradients(self, *args, **kwargs) -> dict:
        return self._scaled(self._ev.run_yield_gradients(*args, **kwargs))


def test_one_compiled_cotangent_serves_samples_of_other_totals(small_data) -> None:
    """Three samples (other sums of weights, events and variance factors) run one
    program; each sample's yields follow its own totals (xsec * lumi / sumw), and its
    objective and gradient equal those of an objective compiled for it alone."""
    cfg = H.make_config(small_data)
    ev = Evaluator(cfg)
    params = {"jet_pt_min": 32.5, "jet_abs_eta_max": 2.4, "btag_min": 0.1, "min_jets": 2.0}
    widths = np.array(H.WIDTHS)
    shared = Objective(cfg, ev.plan)
    for scale, (f, g) in zip((1.0, 0.7, 0.3), ((1.0, 1.0), (0.7, 0.6), (0.3, 0.45)),
                             strict=True):
        sample = _Sample(ev, {"ttbar": (f, f), "dy": (g, g)})
        shared.variance_scale = scale
        got = reverse_objective(shared, sample, params, widths)
        alone = Objective(cfg, ev.plan)  # its own program, compiled for these totals
        alone.variance_scale = scale
        want = reverse_objective(alone, sample, params, widths)
        states = got["states"]
        scales = dataset_scales(cfg, {n: st.sumw for n, st in states.items()},
                                {n: st.events for n, st in states.items()},
                                variance_scale=scale)
        for name, xsec in (("ttbar", 831.76), ("dy", 6077.0)):
            selected = float(np.asarray(dataset_report(states[name], ev.plan)["selected_sumw"]))
            norm = xsec * 10.0 / states[name].sumw
            assert scales[name]["norm"] == pytest.approx(norm, rel=1e-15)
            assert got["yields"][name] == pytest.approx(norm * selected, rel=1e-12)
        assert got["objective"] == pytest.approx(want["objective"], rel=1e-13)
        np.testing.assert_allclose(got["grad"], want["grad"], rtol=1e-12)
    assert [k for k in shared._compiled if k[0] == "reverse"] == [("reverse", ("ttbar", "dy"))]
