"""The expected CLs upper limit on mu (analysis/likelihood/limit.py) against pyhf's
``upper_limit`` on the workspace we export, the closed form of one bin with a known
background, finite differences of a chunked toy pass; the profile fits and the limit
the same for any chunking (1e-9); a limit that cannot exist is one line."""

from __future__ import annotations

import math
from statistics import NormalDist

import jax
import numpy as np
import pyhf
import pytest
from scipy.special import lambertw

from analysis import likelihood as lk
from tests.conftest import central_difference
from tests.likelihood.test_grad import MODEL, NAMES, THETA, run
from tests.likelihood.test_pyhf import CASES, hist_state, random_case

C95 = NormalDist().inv_cdf(1 - 0.05 / 2)  # sqrt(q~mu) at CLs = 0.05


def pyhf_limits(section, *, rtol=None):
    """pyhf's observed and median expected CLs limits (qtilde, asymptotics) on the
    background-only Asimov data of the workspace :func:`lk.pyhf_workspace` writes."""
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer(tolerance=1e-14))
    ws = pyhf.Workspace(lk.pyhf_workspace(section))
    model = ws.model(modifier_settings={"normsys": {"interpcode": "code1"},
                                        "histosys": {"interpcode": "code4p"}})
    pars = model.config.suggested_init()
    pars[model.config.poi_index] = 0.0
    data = model.expected_data(pars)  # mu = 0, nominal nuisances and auxiliary data
    kwargs = {} if rtol is None else {"rtol": rtol}
    obs, exp = pyhf.infer.intervals.upper_limits.upper_limit(data, model, level=0.05, **kwargs)
    return float(obs), float(np.asarray(exp)[2])


# ~2 min each on a loaded machine (pyhf's root: a hypotest of 4 scipy fits per step)
# slow (50 s a case): tests/likelihood/test_yaml_pipeline.py compares the written limit
# with pyhf's in the default run
@pytest.mark.slow
@pytest.mark.parametrize("case", ["1ch-3bins", pytest.param("2ch-4bins", marks=pytest.mark.slow),
                                  pytest.param("2ch-pulled-beyond-1", marks=pytest.mark.slow)])
def test_limit_equals_pyhf_on_the_exported_workspace(case):
    states, model = random_case(7, **CASES[case])
    limit = lk.cls_limit(states, model)
    lk.raise_for_limit(limit)
    section = lk.results_section(states, model, lk.significance(states, model), limit=limit)
    got = section["upper_limit"]["value"]
    assert section["upper_limit"]["reliable"] and 0.3 < got < 5
    # pyhf's root finder (toms748) at its default tolerance: the 2e-3
    obs, exp = pyhf_limits(section)
    assert abs(got - obs) <= 2e-3 * got and abs(got - exp) <= 2e-3 * got, (got, obs, exp)
    # and at rtol 1e-12 (ours: ROOT_RTOL 1e-12): what remains is pyhf's fit tolerance
    obs, exp = pyhf_limits(section, rtol=1e-12)
    assert abs(got - obs) <= 1e-7 * got and abs(got - exp) <= 1e-7 * got, (got, obs, exp)


def closed_form_limit(s, b, level=0.05):
    """One bin, known background b, signal s at mu = 1, data n = b: q~mu = 2 (mu s - b
    ln(1 + mu s / b)) = c^2 with y = 1 + mu s / b solves y - ln y = k = 1 + c^2 / (2 b),
    i.e. y = -W_{-1}(-exp(-k)) (Lambert's W, the branch below -1)."""
    c = NormalDist().inv_cdf(1 - level / 2)
    k = 1.0 + c * c / (2.0 * b)
    y = -lambertw(-math.exp(-k), k=-1).real
    return (b / s) * (y - 1.0)


@pytest.mark.parametrize(("s", "b"), [(5.0, 20.0), (12.0, 100.0), (3.0, 0.4), (40.0, 2000.0)])
@pytest.mark.parametrize("level", [0.05, 0.1])
def test_one_bin_closed_form(s, b, level):
    states = {"sig": {"h": hist_state([s])}, "bkg": {"h": hist_state([b])}}
    model = lk.Model([lk.Channel("sr", "h")], ["sig"], mc_stat=False)
    limit = lk.cls_limit(states, model, level=level)
    lk.raise_for_limit(limit)
    want = closed_form_limit(s, b, level)
    assert abs(float(limit.mu) - want) <= 1e-10 * want, (float(limit.mu), want)
    c = NormalDist().inv_cdf(1 - level / 2)
    assert abs(float(limit.q) - c * c) <= 1e-9
    # large b: the Gaussian limit c sqrt(b) / s
    if b > 1000:
        assert abs(want - c * math.sqrt(b) / s) <= 0.02 * want


def limit_of(t):
    d = run(dict(zip(NAMES, t, strict=True)), order=0)
    return float(lk.upper_limit(d.value, MODEL))


def test_limit_gradient_equals_finite_differences_of_the_pass():
    """d(limit)/d(param) through the merged states' Jacobian (forward mode) and with
    jax.grad on the states (reverse mode), against central differences of the whole pass
    with the root and every fit rerun."""
    d = run(THETA)
    mu, grad = d.value_and_grad(lambda s: lk.upper_limit(s, MODEL))
    fd = central_difference(limit_of, [THETA[n] for n in NAMES], 0.05, points=5)
    assert 0.05 < mu < 20
    for i, n in enumerate(NAMES):
        assert abs(grad[n] - fd[i]) <= 1e-5 * max(abs(fd[i]), 1e-3), (n, grad[n], fd[i])
    assert max(abs(v) for v in grad.values()) > 1e-3
    # reverse mode on the templates = forward mode through the Jacobian
    g_states = jax.grad(lambda s: lk.upper_limit(s, MODEL))(d.value)
    rev = {n: sum(float(np.sum(np.asarray(gs) * np.asarray(j)[..., k]))
                  for gs, j in zip(jax.tree_util.tree_leaves(g_states),
                                   jax.tree_util.tree_leaves(d.jac), strict=True))
           for k, n in enumerate(NAMES)}
    for n in NAMES:
        assert abs(rev[n] - grad[n]) <= 1e-10 * max(abs(grad[n]), 1e-8), (n, rev[n], grad[n])


def test_limit_template_gradient_equals_finite_differences():
    """d(limit)/d(template entry) of a model with shape, lnN and MC-statistics nuisances
    (the background enters the data too): the templates and model of the pass above,
    whose reverse-mode program (~10 s to compile cold) this shares."""
    states, model = run(THETA, order=0).value, MODEL
    g = jax.grad(lambda s: lk.upper_limit(s, model))(states)
    for ds, key, i in (("sig", "ht", 1), ("bkg", "ht", 0), ("dy", "ht_jes_up", 2)):
        h = states[ds][key]

        def f(x, ds=ds, key=key, i=i, h=h):
            sumw = np.array(h.sumw_flow, dtype=np.float64)
            sumw[i + 1] = x[0]
            moved = {k: dict(v) for k, v in states.items()}
            moved[ds][key] = type(h)(h.edges.tolist(), sumw, np.asarray(h.sumw2_flow))
            return float(lk.upper_limit(moved, model))

        x0 = float(np.asarray(h.sumw_flow)[i + 1])
        fd = central_difference(f, [x0], 1e-3 * x0, points=5)[0]
        got = float(np.asarray(g[ds][key].sumw_flow)[i + 1])
        assert abs(got - fd) <= 1e-6 * max(abs(fd), 1e-6), (ds, key, got, fd)


def test_fits_z_and_limit_do_not_depend_on_the_chunking():
    """Z, dZ/dparam, every fitted nuisance of the mu = 0 fit, the limit, its gradient and
    the fit at the limit: the same to 1e-9 for two chunkings of the pass (the templates
    differ by rounding, ~1e-16)."""
    def results(splits):
        d = run(THETA, splits=splits)
        out = {}
        out["z"], out["gz"] = d.value_and_grad(lambda s: lk.discovery_significance(s, MODEL))
        out["mu"], out["gmu"] = d.value_and_grad(lambda s: lk.upper_limit(s, MODEL))
        out["fit"] = lk.significance(d.value, MODEL).fit
        out["limit"] = lk.cls_limit(d.value, MODEL)
        lk.raise_for_fit(out["fit"], step="test")
        lk.raise_for_limit(out["limit"])
        return out

    a, b = results((0,)), results((0, 17, 900, 2222))
    assert abs(a["z"] - b["z"]) <= 1e-9 * a["z"] and abs(a["mu"] - b["mu"]) <= 1e-9 * a["mu"]
    for key in ("gz", "gmu"):
        for n in NAMES:
            assert abs(a[key][n] - b[key][n]) <= 1e-9 * abs(a[key][n]), (key, n)
    for fa, fb in ((a["fit"], b["fit"]), (a["limit"].fit, b["limit"].fit)):
        na, nb = np.asarray(fa.nuisances), np.asarray(fb.nuisances)
        assert np.max(np.abs(na)) > 1e-3  # fits that move
        np.testing.assert_allclose(nb, na, rtol=0, atol=1e-9)


def test_no_signal_has_no_limit_and_says_so_in_one_line():
    states = {"sig": {"h": hist_state([0.0, 0.0])}, "bkg": {"h": hist_state([10.0, 4.0])}}
    model = lk.Model([lk.Channel("sr", "h")], ["sig"], mc_stat=False)
    limit = lk.cls_limit(states, model)
    assert not bool(limit.converged)
    with pytest.raises(lk.FitError, match="CLs upper limit did not converge") as err:
        lk.raise_for_limit(limit)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("level", [0.0, 1.0, -0.1, True, "0.05"])
def test_bad_level_is_refused(level):
    states = {"sig": {"h": hist_state([1.0])}, "bkg": {"h": hist_state([10.0])}}
    model = lk.Model([lk.Channel("sr", "h")], ["sig"], mc_stat=False)
    with pytest.raises(ValueError, match="level"):
        lk.cls_limit(states, model, level=level)
