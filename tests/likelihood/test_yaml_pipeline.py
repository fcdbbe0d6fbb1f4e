"""The YAML likelihood (issue 17) end to end on generated NanoAOD: histograms,
channels with their own selection, shift / weight / lnN systematics, MC statistics.

References: pyhf on the templates results.json writes (a workspace built from the
JSON section alone, not from our model code); ``hist`` fills of the awkward hard-cut
selection (nominal, the PSWeight-weighted sample, the file with ``Jet.pt x 1.03``);
central differences of the whole pass with the fit rerun; another chunking and the
futures executor.
"""

from __future__ import annotations

import copy
import math

import awkward as ak
import hist
import numpy as np
import pyhf
import pytest
import uproot

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.optimize.lksection import likelihood_section
from tests.conftest import central_difference

EDGES_LEAD = [20.0, 60.0, 100.0, 160.0, 400.0]
EDGES_B = [20.0, 50.0, 90.0, 150.0, 400.0]
PARAMS = {"jet_pt_min": 32.0, "btag_min": 0.35}
# small enough that no nuisance is pulled beyond pyhf's bounds (+-5) in the mu = 0 fit
LUMI = 0.01


def lk_config(data, *, chunksize=1500, executor="iterative", widths=(5.0, 0.05)) -> dict:
    return {
        "datasets": {
            "ttbar": {"files": [str(data / "ttbar" / "*.root")], "weight": "genWeight",
                      "role": "signal", "xsec": 831.76},
            "dy": {"files": [str(data / "dy" / "*.root")], "weight": "genWeight",
                   "role": "background", "xsec": 6077.0},
        },
        "lumi": LUMI,
        "executor": {"type": executor, "chunksize": chunksize,
                     **({"workers": 2} if executor == "futures" else {})},
        "parameters": {"jet_pt_min": {"init": 30.0, "bounds": [15.0, 80.0]},
                       "btag_min": {"init": 0.3, "bounds": [0.05, 0.95]}},
        "objects": {
            "jets": {"collection": "Jet", "cuts": [
                {"var": "pt", "op": ">", "param": "jet_pt_min", "width": widths[0]}]},
            "bjets": {"from": "jets", "cuts": [
                {"var": "btagDeepFlavB", "op": ">", "param": "btag_min", "width": widths[1]}]},
        },
        "selection": [{"count": "jets", "op": ">=", "value": 3}],
        "histograms": [{"name": "lead", "x": "jets[0].pt", "edges": EDGES_LEAD},
                       {"name": "bpt", "x": "bjets.pt", "edges": EDGES_B}],
        "systematics": [
            {"name": "jes", "type": "shift", "field": "Jet.pt", "up": 1.03, "down": 0.97},
            {"name": "isr", "type": "weight", "up": "PSWeight[0]", "down": "PSWeight[2]"},
            {"name": "bkg", "type": "lnN", "datasets": ["dy"], "kappa": 1.2},
        ],
        "likelihood": {"channels": {
            "b1": {"histogram": "lead", "selection": [{"count": "bjets", "op": "==", "value": 1}]},
            "b2": {"histogram": "bpt", "selection": [{"count": "bjets", "op": ">=", "value": 2}]},
        }, "mc_stat": True, "upper_limit": True},
        "objective": {"terms": [{"type": "discovery_significance"}]},
    }


def section(cfg: dict, params=PARAMS, *, widths=None, order=1, backend=None) -> dict:
    with Evaluator(config_from_dict(cfg), backend=backend) as ev:
        states = ev.run(params, widths=widths, order=order)
        return likelihood_section(ev.config, ev.plan, states)


@pytest.fixture(scope="module")
def soft(small_data, backend):
    """The soft pass's likelihood section on each backend (fixture ``backend``)."""
    return section(lk_config(small_data), backend=backend)


def pyhf_model(sec: dict):
    """A pyhf model written from the ``likelihood`` section alone."""
    spec = {"channels": []}
    for ch, c in sec["channels"].items():
        samples = []
        # bins no sample fills add nothing to our NLL (the floor); pyhf's staterror
        # would be 0 / 0 there
        keep = np.sum([t["nominal"]["sumw"] for t in c["samples"].values()], axis=0) > 0

        def kept(v, keep=keep):
            return np.asarray(v)[keep].tolist()

        for ds, t in c["samples"].items():
            mods = [{"name": f"staterror_{ch}", "type": "staterror",
                     "data": np.sqrt(kept(t["nominal"]["sumw2"])).tolist()}] if sec["mc_stat"] else []
            if ds in sec["signal"]:
                mods.append({"name": "mu", "type": "normfactor", "data": None})
            for s, v in t["variations"].items():
                mods.append({"name": s, "type": "histosys",
                             "data": {"hi_data": kept(v["up"]), "lo_data": kept(v["down"])}})
            for n, norm in sec["normalisations"].items():
                if ds in norm["datasets"]:
                    mods.append({"name": n, "type": "normsys",
                                 "data": {"hi": norm["kappa"], "lo": 1 / norm["kappa"]}})
            samples.append({"name": ds, "data": kept(t["nominal"]["sumw"]), "modifiers": mods})
        spec["channels"].append({"name": ch, "samples": samples})
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer(tolerance=1e-14))
    return pyhf.Model(spec, poi_name="mu", modifier_settings={
        "normsys": {"interpcode": "code1"}, "histosys": {"interpcode": "code4p"}})


def pyhf_z(sec: dict) -> float:
    """Z of a pyhf workspace written from the ``likelihood`` section alone."""
    m = pyhf_model(sec)
    cfg = m.config
    data = m.expected_data(cfg.suggested_init())
    q0 = pyhf.infer.test_statistics.q0(0.0, data, m, cfg.suggested_init(),
                                       cfg.suggested_bounds(), cfg.suggested_fixed())
    return math.sqrt(float(q0))


def test_z_of_the_written_templates_is_pyhf_z(soft) -> None:
    assert soft["fit"]["converged"]
    assert max(abs(v) for v in soft["fit"]["nuisances"].values()) < 5  # pyhf's bounds
    z = soft["significance"]["value"]
    assert 1 < z < 50
    np.testing.assert_allclose(z, pyhf_z(soft), rtol=1e-6)
    # every channel carries both datasets, each with the two shape variations
    for c in soft["channels"].values():
        assert set(c["samples"]) == {"ttbar", "dy"}
        for t in c["samples"].values():
            assert set(t["variations"]) == {"jes", "isr"}
            assert t["variations"]["jes"]["up"] != t["nominal"]["sumw"]


# JAX: 40 s cold; the JAX backend's gradient against central differences in the default
# run: tests/pipeline/test_object_sets_enumeration.py::test_soft_pipeline_against_enumeration
@pytest.mark.slow_on("jax")
def test_z_and_limit_gradients_equal_central_differences(small_data, soft, backend) -> None:
    cfg = lk_config(small_data)
    names = list(PARAMS)

    def z(x):  # Z and the expected CLs limit, the fits and the root rerun
        sec = section(cfg, dict(zip(names, map(float, x))), order=0, backend=backend)
        return np.array([sec["significance"]["value"], sec["upper_limit"]["value"]])

    fd = central_difference(z, [PARAMS[n] for n in names], [0.05, 1e-4])
    for i, key in enumerate(("significance", "upper_limit")):
        grad = [soft[key]["grad"][n] for n in names]
        np.testing.assert_allclose(grad, fd[i], rtol=1e-5, err_msg=key)
        assert min(abs(g) for g in grad) > 1e-4


# JAX: ~110 s cold (futures workers compile again); the JAX backend's chunk invariance in
# the default run: tests/pipeline/test_replicas.py (chunkings, both backends)
@pytest.mark.slow_on("jax")
def test_templates_and_z_do_not_depend_on_chunking_or_executor(small_data, soft,
                                                               backend) -> None:
    other = section(lk_config(small_data, chunksize=700, executor="futures"), backend=backend)
    for ch, c in soft["channels"].items():
        for ds, t in c["samples"].items():
            u = other["channels"][ch]["samples"][ds]
            np.testing.assert_allclose(u["nominal"]["sumw"], t["nominal"]["sumw"], rtol=1e-10)
            np.testing.assert_allclose(u["nominal"]["sumw2"], t["nominal"]["sumw2"], rtol=1e-10)
            for s in t["variations"]:
                for side in ("up", "down"):
                    np.testing.assert_allclose(u["variations"][s][side],
                                               t["variations"][s][side], rtol=1e-10)
    # Z, the expected limit, their gradients and every fitted nuisance: 1e-9 (the fits
    # converge to rounding: analysis/likelihood/fit.py, NEWTON_ATOL; the root: ROOT_RTOL)
    for key in ("significance", "upper_limit"):
        np.testing.assert_allclose(other[key]["value"], soft[key]["value"], rtol=1e-10)
        for n, g in soft[key]["grad"].items():
            np.testing.assert_allclose(other[key]["grad"][n], g, rtol=1e-9, err_msg=key)
    for n, v in soft["fit"]["nuisances"].items():
        np.testing.assert_allclose(other["fit"]["nuisances"][n], v, rtol=0, atol=1e-9, err_msg=n)


@pytest.mark.slow_on("jax")
def test_upper_limit_of_the_written_templates_is_pyhf(soft) -> None:
    """results.json's ``upper_limit``: pyhf's ``upper_limit`` (qtilde, asymptotics) on
    background-only Asimov data of the workspace exported from the same section."""
    from tests.likelihood.test_limit import pyhf_limits

    lim = soft["upper_limit"]
    assert lim["reliable"] and lim["level"] == 0.05 and set(lim["grad"]) == set(PARAMS)
    obs, exp = pyhf_limits(soft)
    assert 0 < lim["value"] < 1, lim  # Z ~ 11: the limit is well below mu = 1
    assert abs(lim["value"] - obs) <= 2e-3 * lim["value"], (lim["value"], obs)
    assert abs(lim["value"] - exp) <= 2e-3 * lim["value"], (lim["value"], exp)


def test_the_limit_is_computed_only_when_asked(small_data, monkeypatch) -> None:
    """Without a ``cls_upper_limit`` term or ``likelihood: {upper_limit: true}`` the
    section has no ``upper_limit`` and the limit's root is never run (its compilation
    took ~40 s cold on every evaluate)."""
    from analysis import likelihood as lk

    def boom(*args, **kwargs):
        raise AssertionError("the limit was computed")

    monkeypatch.setattr(lk, "cls_limit", boom)
    monkeypatch.setattr(lk, "upper_limit", boom)
    cfg = lk_config(small_data)
    del cfg["likelihood"]["upper_limit"]
    sec = section(cfg, order=1, backend="numba")
    assert "upper_limit" not in sec
    assert sec["significance"]["value"] > 0 and sec["significance"]["grad"]


def _hard_templates(data, ds: str, xsec: float, norm_lumi: float, pt_scale: float = 1.0,
                    factor: str | None = None) -> dict:
    """``{channel: hist}`` of the hard-cut selection with awkward (module docstring)."""
    files = sorted((data / ds).glob("*.root"))
    a = ak.concatenate([uproot.open(f)["Events"].arrays(library="ak") for f in files])
    f64 = {k: ak.values_astype(a[k], np.float64) for k in
           ("genWeight", "PSWeight", "Jet_pt", "Jet_btagDeepFlavB")}  # the files hold float32
    w = f64["genWeight"] * (1.0 if factor is None
                            else f64["PSWeight"][:, {"up": 0, "down": 2}[factor]])
    norm = xsec * norm_lumi / float(ak.sum(f64["genWeight"]))
    pt = f64["Jet_pt"] * pt_scale
    jet = pt > PARAMS["jet_pt_min"]
    b = jet & (f64["Jet_btagDeepFlavB"] > PARAMS["btag_min"])
    nj, nb = ak.sum(jet, 1), ak.sum(b, 1)
    out = {}
    sel1 = (nj >= 3) & (nb == 1)
    h1 = hist.Hist(hist.axis.Variable(EDGES_LEAD), storage=hist.storage.Weight())
    lead = ak.max(ak.where(jet, pt, -1.0), axis=1)
    h1.fill(ak.to_numpy(lead[sel1]), weight=ak.to_numpy(norm * w[sel1]))
    out["b1"] = h1
    sel2 = (nj >= 3) & (nb >= 2)
    h2 = hist.Hist(hist.axis.Variable(EDGES_B), storage=hist.storage.Weight())
    bpt = pt[b][sel2]
    h2.fill(ak.to_numpy(ak.flatten(bpt)),
            weight=ak.to_numpy(ak.flatten(ak.broadcast_arrays(norm * w[sel2], bpt)[0])))
    out["b2"] = h2
    return out


# JAX: 35 s cold; the JAX backend at width 0 against awkward + vector in the default run:
# tests/pipeline/test_object_sets_hardcut.py::test_width0_matches_awkward_vector_hard_cuts
@pytest.mark.slow_on("jax")
def test_hard_templates_equal_hist_fills_of_awkward_selections(small_data, backend) -> None:
    """Width 0: nominal templates, the isr (PSWeight) and jes (Jet.pt x 1.03 / 0.97)
    variations equal ``hist`` fills of the awkward hard-cut selection of the sample,
    the weighted sample and the shifted file, on every backend."""
    cfg = lk_config(small_data, widths=(0.0, 0.0))
    sec = section(cfg, widths=np.zeros(2), order=0, backend=backend)
    xsec = {"ttbar": 831.76, "dy": 6077.0}
    for ds in ("ttbar", "dy"):
        cases = {"nominal": _hard_templates(small_data, ds, xsec[ds], LUMI)}
        for side in ("up", "down"):
            cases[f"isr {side}"] = _hard_templates(small_data, ds, xsec[ds], LUMI, factor=side)
            cases[f"jes {side}"] = _hard_templates(
                small_data, ds, xsec[ds], LUMI, pt_scale={"up": 1.03, "down": 0.97}[side])
        for ch in ("b1", "b2"):
            t = sec["channels"][ch]["samples"][ds]
            for what, ref in cases.items():
                got = (t["nominal"]["sumw"] if what == "nominal"
                       else t["variations"][what.split()[0]][what.split()[1]])
                want = ref[ch].values()
                assert np.sum(want) > 0 or ds == "dy", (ds, ch, what)
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12,
                                           err_msg=f"{ds} {ch} {what}")
            np.testing.assert_allclose(t["nominal"]["sumw2"], cases["nominal"][ch].variances(),
                                       rtol=1e-9, atol=1e-12)


def _evaluate_error(cfg: dict, tmp_path) -> str:
    import contextlib
    import io

    from analysis.cli.parser import main
    from tests.conftest import one_line_error, write_config

    path = write_config(tmp_path, cfg)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["evaluate", str(path), "--output", str(tmp_path / "out"), "--quiet"])
    assert rc == 2
    return one_line_error(err.getvalue())


def test_variation_branch_that_does_not_exist_is_one_line(small_data, tmp_path) -> None:
    cfg = copy.deepcopy(lk_config(small_data))
    cfg["systematics"][1]["up"] = "PSWeigth[0]"
    line = _evaluate_error(cfg, tmp_path)
    assert "PSWeigth" in line and ".root" in line and "PSWeight" in line, line


def test_variation_index_beyond_the_branch_is_one_line(small_data, tmp_path) -> None:
    cfg = copy.deepcopy(lk_config(small_data))
    cfg["systematics"][1]["up"] = "PSWeight[7]"
    line = _evaluate_error(cfg, tmp_path)
    assert "PSWeight[7]" in line and ".root" in line and "entry 0 has 4" in line, line


def test_non_finite_template_is_one_line_naming_the_bin(small_data, tmp_path) -> None:
    cfg = copy.deepcopy(lk_config(small_data))
    cfg["systematics"][1]["up"] = "PSWeight[0] / 0"
    line = _evaluate_error(cfg, tmp_path)
    assert "variation 'isr' up" in line and "bin 0 [20, 60)" in line and "finite" in line, line


@pytest.mark.slow  # 2 optimisation steps and the final passes, ~60 s
def test_optimize_for_the_discovery_significance(small_data, tmp_path) -> None:
    import json

    from analysis.cli.parser import main
    from tests.conftest import write_config

    cfg = lk_config(small_data)
    cfg["optimizer"] = {"name": "adam", "learning_rate": 0.05, "steps": 2}
    path = write_config(tmp_path, cfg)
    out = tmp_path / "out"
    assert main(["optimize", str(path), "--output", str(out), "--quiet", "--no-plots"]) == 0
    r = json.loads((out / "results.json").read_text())
    for h in r["history"]:
        assert h["objective"] < 0  # -Z
    soft, hard = r["final"]["soft"]["likelihood"], r["final"]["hard"]["likelihood"]
    assert r["likelihood"] == hard and set(hard["channels"]) == {"b1", "b2"}
    np.testing.assert_allclose(-soft["significance"]["value"], r["final"]["soft"]["objective"],
                               rtol=1e-9)
    # (at hard cuts a bin may hold signal and no background: Z is finite by the floor of
    # the expected count, where pyhf's NLL is infinite; the soft Z is checked against pyhf)
    assert math.isfinite(hard["significance"]["value"]) and hard["significance"]["grad"] == {}
    assert set(soft["significance"]["grad"]) == {"jet_pt_min", "btag_min"}
    # the configured histograms at the final hard cuts, normalised as the templates: the
    # b2 channel is bpt at >= 2 b-jets, a subset of the selection's bpt histogram
    hists = r["histograms"]
    assert set(hists) == {"lead", "bpt"} and hists["bpt"]["edges"] == EDGES_B
    for ds in ("ttbar", "dy"):
        full = np.asarray(hists["bpt"]["datasets"][ds]["sumw"])
        part = np.asarray(hard["channels"]["b2"]["samples"][ds]["nominal"]["sumw"])
        assert np.all(part <= full + 1e-12) and full.sum() > 0


@pytest.mark.slow  # one soft pass, ~30 s
def test_a_fit_that_does_not_converge_stops_optimize_naming_the_step(small_data, tmp_path):
    import contextlib
    import io

    from analysis.cli.parser import main
    from tests.conftest import one_line_error, write_config

    cfg = lk_config(small_data)
    cfg["objective"] = {"terms": [{"type": "discovery_significance", "max_steps": 1}]}
    cfg["optimizer"] = {"name": "adam", "learning_rate": 0.05, "steps": 3}
    path = write_config(tmp_path, cfg)
    out = tmp_path / "out"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["optimize", str(path), "--output", str(out), "--quiet", "--no-plots"])
    assert rc == 2
    line = one_line_error(err.getvalue())
    assert "step 0" in line and "did not converge" in line and "after 1 steps" in line, line
    assert "checkpoint" in line


@pytest.mark.slow  # one soft pass with its Jacobian, ~30 s
def test_mu_uncertainty_term_is_pyhf_profile_curvature(small_data) -> None:
    """The ``mu_uncertainty`` objective of the pass: pyhf's profile-likelihood curvature
    at mu = 1 on the written templates (``sigma^2 = 2 h^2 / (q(1+h) + q(1-h))``), and
    its gradient exists for every parameter."""
    from analysis.optimize.objectives import Objective, objective_from_states
    from analysis.pipeline.plan import build_plan

    cfg = lk_config(small_data)
    cfg["objective"] = {"terms": [{"type": "mu_uncertainty"}]}
    config = config_from_dict(cfg)
    with Evaluator(config) as ev:
        states = ev.run(PARAMS, order=1)
        res = objective_from_states(Objective(config, build_plan(config)), states)
        sec = likelihood_section(config, ev.plan, states)
    m = pyhf_model(sec)
    data, c = m.expected_data(m.config.suggested_init()), m.config

    def twice_nll(mu):
        _, val = pyhf.infer.mle.fixed_poi_fit(mu, data, m, c.suggested_init(),
                                              c.suggested_bounds(), c.suggested_fixed(),
                                              return_fitted_val=True)
        return float(val)

    h = 1e-3
    ref = math.sqrt(2 * h * h / (twice_nll(1 + h) + twice_nll(1 - h) - 2 * twice_nll(1.0)))
    np.testing.assert_allclose(res["objective"], ref, rtol=1e-5)
    assert np.all(np.isfinite(res["grad"])) and np.all(res["grad"] != 0)


@pytest.mark.slow  # one soft pass with its Jacobian, ~30 s
def test_cls_upper_limit_term_is_the_limit_of_the_section(small_data) -> None:
    """``{type: cls_upper_limit, level: 0.05}``: the objective (minimised) and its gradient
    are results.json's ``likelihood.upper_limit`` value and gradient."""
    from analysis.optimize.objectives import Objective, objective_from_states
    from analysis.pipeline.plan import build_plan

    cfg = lk_config(small_data)
    cfg["objective"] = {"terms": [{"type": "cls_upper_limit", "level": 0.05}]}
    config = config_from_dict(cfg)
    plan = build_plan(config)
    with Evaluator(config) as ev:
        states = ev.run(PARAMS, order=1)
        res = objective_from_states(Objective(config, plan), states)
        sec = likelihood_section(config, ev.plan, states)
    lim = sec["upper_limit"]
    np.testing.assert_allclose(res["objective"], lim["value"], rtol=1e-12)
    np.testing.assert_allclose(res["grad"], [lim["grad"][n] for n in plan.param_names],
                               rtol=1e-9)
    assert np.all(res["grad"] != 0)
