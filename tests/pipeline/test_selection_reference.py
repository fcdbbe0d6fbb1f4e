"""The evaluated statistics against references written independently of the kernel.

- Soft cuts: a numpy/long-double computation on the real ttbar file (uproot arrays,
  sigmoid object weights, the Poisson-binomial P(K >= N) by brute-force
  enumeration of every subset of an event's jets, raw weighted sums) agrees with
  ``Evaluator`` to 1e-10 relative.
- Hard cuts (``width: 0``): the same statistics equal plain awkward (``ak.mean``,
  ``ak.var``, ``ak.std``, ``ak.moment``, ``ak.covar``, ``ak.corr``,
  ``ak.linear_fit``) on the jets that pass pT > 30 and |eta| < 2.4 in events with
  at least two such jets, weighted by genWeight and unweighted.
"""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np
import pytest
import uproot

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.pipeline.results import dataset_report
from tests.chunked_helpers import (
    NANOAOD_WARNINGS,
    TTBAR,
    TTBAR_EVENTS,
    UNIVARIATE,
    analysis_config,
    flatten,
)
from tests.reference import configurations

LD = np.longdouble  # x87 extended precision: the reference is more precise than float64

pytestmark = NANOAOD_WARNINGS


@pytest.fixture(scope="module")
def ttbar_arrays() -> dict[str, Any]:
    """Jet pt/eta (jagged) and genWeight straight from the file, as float64."""
    tree = uproot.open(TTBAR)["Events"]
    arrays = tree.arrays(["Jet_pt", "Jet_eta", "genWeight"])
    return {
        "pt": ak.values_astype(arrays["Jet_pt"], np.float64),
        "eta": ak.values_astype(arrays["Jet_eta"], np.float64),
        "weight": ak.to_numpy(arrays["genWeight"]).astype(np.float64),
    }


# --- numpy reference -------------------------------------------------------------------


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def prob_at_least_brute_force(p: np.ndarray, n_min: int) -> Any:
    """P(at least ``n_min`` of independent objects pass), by summing the probability
    of every pass/fail pattern (2**len(p) of them)."""
    patterns, probability = configurations(p)  # the oracle of tests/reference
    return probability[patterns.sum(axis=1) >= n_min].sum(dtype=LD)


def prob_at_least_dp(p: np.ndarray, n_min: int) -> Any:
    """The same probability by the textbook recursion over objects."""
    q = np.zeros(len(p) + 1, dtype=LD)
    q[0] = 1
    for pj in p:
        q[1:] = q[1:] * (1 - pj) + q[:-1] * pj
        q[0] *= 1 - pj
    return q[n_min:].sum()


def weighted_moments(x: np.ndarray, w: np.ndarray) -> dict[str, Any]:
    """Population (ddof=0) weighted mean, var, std, skew, excess kurtosis, from raw
    weighted power sums in long double (their cancellation costs ~2 digits of 19)."""
    x, w = x.astype(LD), w.astype(LD)
    sw = w.sum()
    raw = [(w * x**k).sum() / sw for k in range(5)]
    mu = raw[1]
    m2 = raw[2] - mu**2
    m3 = raw[3] - 3 * mu * raw[2] + 2 * mu**3
    m4 = raw[4] - 4 * mu * raw[3] + 6 * mu**2 * raw[2] - 3 * mu**4
    return {
        "mean": mu,
        "var": m2,
        "std": np.sqrt(m2),
        "skew": m3 / m2**1.5,
        "kurtosis": m4 / m2**2 - 3,
    }


def weighted_pair(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, Any]:
    """Weighted covariance, correlation and ak.linear_fit's line (weights enter
    linearly: no chi2 rescaling of the errors), from raw sums in long double."""
    x, y, w = x.astype(LD), y.astype(LD), w.astype(LD)
    sw, swx, swy = w.sum(), (w * x).sum(), (w * y).sum()
    swxx, swyy, swxy = (w * x * x).sum(), (w * y * y).sum(), (w * x * y).sum()
    cov = swxy / sw - swx * swy / sw**2
    var_x, var_y = swxx / sw - (swx / sw) ** 2, swyy / sw - (swy / sw) ** 2
    delta = sw * swxx - swx * swx
    return {
        "covar": cov,
        "corr": cov / np.sqrt(var_x * var_y),
        "linear_fit": {
            "intercept": (swxx * swy - swx * swxy) / delta,
            "slope": (sw * swxy - swx * swy) / delta,
            "intercept_error": np.sqrt(swxx / delta),
            "slope_error": np.sqrt(sw / delta),
        },
    }


def soft_reference(arrays: dict[str, Any], pt_min: float, eta_max: float, min_jets: int) -> dict:
    """The soft-selected statistics of the issue's analysis (widths 5 GeV and 0.1)."""
    pts, etas = [], []
    jet_w, ht, event_w = [], [], []
    for pt, eta, g in zip(
        ak.to_list(arrays["pt"]), ak.to_list(arrays["eta"]), arrays["weight"], strict=True
    ):
        pt, eta = np.array(pt, dtype=LD), np.array(eta, dtype=LD)
        p = sigmoid((pt - LD(pt_min)) / LD(5.0)) * sigmoid((LD(eta_max) - np.abs(eta)) / LD(0.1))
        p_event = prob_at_least_brute_force(p, min_jets)
        pts.append(pt)
        etas.append(eta)
        jet_w.append(LD(g) * p_event * p)
        ht.append((p * pt).sum())
        event_w.append(LD(g) * p_event)
    x, y, w = np.concatenate(pts), np.concatenate(etas), np.concatenate(jet_w)
    event_w = np.array(event_w, dtype=LD)
    return {
        "selected_sumw": event_w.sum(),
        "selected_sumw2": (event_w**2).sum(),
        "observables": {
            "jet_pt": weighted_moments(x, w),
            "jet_pt_eta": weighted_pair(x, y, w),
            "ht": weighted_moments(np.array(ht, dtype=LD), event_w),
        },
    }


def report_values(report: dict) -> dict[str, float]:
    """``{path: value}`` of a results.json dataset entry, without gradients and counts."""
    out = {}
    for key, value in flatten(report):
        if key.endswith("/value"):
            out[key[: -len("/value")]] = value
        elif key in ("selected_sumw", "selected_sumw2"):
            out[key] = value
    return out


def assert_values_close(got: dict[str, float], want: dict[str, Any], rtol: float) -> None:
    want_flat = {k: float(v) for k, v in flatten(want)}
    got = {k.removeprefix("observables/"): v for k, v in got.items()}
    want_flat = {k.removeprefix("observables/"): v for k, v in want_flat.items()}
    assert got.keys() == want_flat.keys()
    bad = [
        f"{k}: {got[k]!r} vs {want_flat[k]!r}"
        for k in sorted(got)
        if got[k] is None or not abs(got[k] - want_flat[k]) <= rtol * abs(want_flat[k])
    ]
    assert not bad, "\n".join(bad)


# --- tests ----------------------------------------------------------------------------


def test_poisson_binomial_references_agree() -> None:
    # The two ways of computing the event probability used below agree (and are
    # not trivially 0 or 1) on random events, for several thresholds.
    rng = np.random.default_rng(7)
    for n in range(0, 9):
        p = rng.uniform(0, 1, n).astype(LD)
        for n_min in range(0, 4):
            brute = prob_at_least_brute_force(p, n_min)
            assert abs(brute - prob_at_least_dp(p, n_min)) <= 1e-17
    assert prob_at_least_brute_force(np.array([0.5, 0.5], dtype=LD), 2) == LD(0.25)


@pytest.fixture(scope="module")
def soft_evaluator():
    config = config_from_dict(
        analysis_config({"ttbar": {"files": ["skhep:" + TTBAR.name], "weight": "genWeight"}})
    )
    # 64-event chunks: the statistics come from merged states.
    with Evaluator(config, executor="iterative", chunksize=64) as ev:
        assert len(ev.chunks) > 1
        yield ev


@pytest.mark.parametrize(
    "pt_min, eta_max, min_jets", [(30.0, 2.4, 2), (45.0, 1.5, 1), (25.0, 2.0, 3)]
)
def test_soft_statistics_equal_numpy_reference(
    soft_evaluator, ttbar_arrays, pt_min, eta_max, min_jets
) -> None:
    max_jets = int(ak.max(ak.num(ttbar_arrays["pt"])))
    assert max_jets <= 12, "brute-force enumeration is meant for events with few jets"
    params = {"jet_pt_min": pt_min, "jet_abs_eta_max": eta_max, "min_jets": float(min_jets)}
    state = soft_evaluator.run(params)["ttbar"]
    report = dataset_report(state, soft_evaluator.plan)
    assert report["events"] == TTBAR_EVENTS
    assert report["sumw"] == pytest.approx(float(ttbar_arrays["weight"].sum()), rel=1e-15)
    want = soft_reference(ttbar_arrays, pt_min, eta_max, min_jets)
    assert_values_close(report_values(report), want, rtol=1e-10)


# --- hard cuts against awkward ------------------------------------------------------------


def awkward_reference(arrays: dict[str, Any], weighted: bool) -> dict:
    """The hard-cut analysis written directly in awkward."""
    pt, eta = arrays["pt"], arrays["eta"]
    good = (pt > 30.0) & (abs(eta) < 2.4)
    pt, eta = pt[good], eta[good]
    selected = ak.num(pt) >= 2
    pt, eta = pt[selected], eta[selected]
    g = arrays["weight"][ak.to_numpy(selected)] if weighted else np.ones(int(ak.sum(selected)))
    w = ak.broadcast_arrays(g, pt)[0]  # each jet carries its event's weight
    ht = ak.sum(pt, axis=1)

    def moments(x, weight) -> dict:
        mean = ak.mean(x, weight=weight, axis=None)
        var = ak.var(x, weight=weight, axis=None)
        return {
            "mean": mean,
            "var": var,
            "std": ak.std(x, weight=weight, axis=None),
            "skew": ak.moment(x - mean, 3, weight=weight, axis=None) / var**1.5,
            "kurtosis": ak.moment(x - mean, 4, weight=weight, axis=None) / var**2 - 3,
        }

    fit = ak.linear_fit(pt, eta, weight=w, axis=None)
    return {
        "selected_sumw": np.sum(g),
        "selected_sumw2": np.sum(g**2),
        "observables": {
            "jet_pt": moments(pt, w),
            "jet_pt_eta": {
                "covar": ak.covar(pt, eta, weight=w, axis=None),
                "corr": ak.corr(pt, eta, weight=w, axis=None),
                "linear_fit": {k: fit[k] for k in fit.fields},
            },
            "ht": moments(ht, g),
        },
    }


def test_hard_cuts_equal_awkward(ttbar_arrays, tmp_path) -> None:
    file = ["skhep:" + TTBAR.name]
    config = config_from_dict(
        analysis_config(
            {"weighted": {"files": file, "weight": "genWeight"}, "unweighted": {"files": file}},
            pt_width=0.0,
            eta_width=0.0,
        )
    )
    with Evaluator(config, executor="iterative", chunksize=64) as ev:
        states = ev.run()
        reports = {name: dataset_report(state, ev.plan) for name, state in states.items()}

    pt, eta = ttbar_arrays["pt"], ttbar_arrays["eta"]
    n_selected = int(ak.sum(ak.num(pt[(pt > 30) & (abs(eta) < 2.4)]) >= 2))
    assert 20 < n_selected < TTBAR_EVENTS  # the cuts do select, and not everything
    for name, weighted in (("weighted", True), ("unweighted", False)):
        report = reports[name]
        want = awkward_reference(ttbar_arrays, weighted)
        assert_values_close(report_values(report), want, rtol=1e-10)
        if not weighted:
            assert report["selected_sumw"] == n_selected
        # A hard step has zero derivative everywhere except on the step itself.
        grads = [v for k, v in flatten(report) if "grad" in k]
        assert grads and all(g == 0.0 for g in grads)
    assert set(reports["weighted"]["observables"]["jet_pt"]) == set(UNIVARIATE)
