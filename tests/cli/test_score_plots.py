"""The learned score's distribution plots (``score_NAME.png``): the histogrammed score
values equal the network evaluated with numpy on every jet (per object) and every event
(per event), weighted by genWeight, over several chunks; the plot is written with the
cut on the score at the initial and final parameters; results.json after a
values-only pass says its gradients are absent (null, not zeros)."""

from __future__ import annotations

import awkward as ak
import numpy as np
import uproot

from analysis.cli.plots import plot_scores, score_cuts
from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.pipeline.results import dataset_report
from analysis.stats.mlp import mlp, to_arrays
from tests.optimize.test_score_reverse import _config
from tests.pipeline.test_score_kernel import EV_STD, PATH, TAG_STD, config, numpy_mlp


def _numpy_scores() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    a = uproot.open(PATH)["Events"].arrays(
        ["genWeight", "MET_pt", "MET_phi", "Jet_pt", "Jet_eta", "Jet_btagDeepFlavB"])
    a = ak.values_astype(a, np.float64)
    w = np.asarray(a.genWeight)
    flat = np.stack([ak.to_numpy(ak.flatten(a.Jet_pt)), np.abs(ak.to_numpy(ak.flatten(a.Jet_eta))),
                     ak.to_numpy(ak.flatten(a.Jet_btagDeepFlavB))], axis=1)
    tag = numpy_mlp(to_arrays(mlp(3, hidden=(4, 3), seed=1)), flat, **TAG_STD)
    ev = numpy_mlp(to_arrays(mlp(2, hidden=(3,), seed=2)),
                   np.stack([ak.to_numpy(a.MET_pt), ak.to_numpy(a.MET_phi)], axis=1), **EV_STD)
    return {"tag": (tag, np.repeat(w, np.asarray(ak.num(a.Jet_pt)))), "ev": (ev, w)}


def test_score_histograms_equal_numpy_per_object_and_per_event() -> None:
    ref = _numpy_scores()
    with Evaluator(config_from_dict(config(chunksize=37))) as ev:  # several chunks
        # edges clear of the extreme scores: a score equal to numpy's to ~1e-16 but not to
        # the last bit (another device's tanh) must not change bins
        specs = [{"index": name, "bins": 30, "low": float(x.min()) - 1e-9,
                  "high": float(x.max()) + 1e-9} for name, (x, _) in ref.items()]
        filled = ev.fill_histograms(specs)
    for (name, (x, w)), spec, h in zip(ref.items(), specs, filled):
        want, _ = np.histogram(x, bins=30, range=(spec["low"], spec["high"]), weights=w)
        got = h["tt"]
        assert got.axes[0].name == f"score.{name}"
        np.testing.assert_allclose(got.values(), want, rtol=1e-10, atol=1e-9 * np.abs(w).max())
        np.testing.assert_allclose(got.values(flow=True).sum(), w.sum(), rtol=1e-10)


def test_plot_scores_writes_both_scores_with_their_cuts(tmp_path) -> None:
    cfg = config_from_dict(_config(100_000))  # tt signal, dy background
    assert score_cuts(cfg, "tag") == [(">", [("tag_min", None)])]
    assert score_cuts(cfg, "ev") == [(">", [("ev_min", None)])]
    init = cfg.initial_params()
    final = {**init, "tag_min": 0.4, "score.tag.layers.0.bias[0]": 0.7}
    with Evaluator(cfg) as ev:
        states = ev.run(order=0)
        paths = plot_scores(ev, cfg, init, final, tmp_path,
                            sumw={n: st.sumw for n, st in states.items()})
        assert [p.name for p in paths] == ["score_tag.png", "score_ev.png"]
        assert all(p.stat().st_size > 10_000 for p in paths)
        # values only: no gradients per statistic, said so (null, not zeros)
        report = dataset_report(states["tt"], ev.plan)
    assert report["selected_sumw_grad"] is None
    assert report["observables"]["ht"]["mean"]["grad"] is None
    assert "not computed" in report["gradients"]
    assert report["selected_sumw"] > 0
