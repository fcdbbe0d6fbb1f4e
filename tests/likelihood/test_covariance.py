"""Post-fit uncertainties of the mu = 0 fit (results.json ``fit.uncertainties``, drawn in
pulls.png) against MINUIT's HESSE through pyhf (``fixed_poi_fit(...,
return_uncertainties=True)``) on the pyhf workspace :func:`lk.pyhf_workspace` writes
from the same section: a numerical Hessian of pyhf's own likelihood, not ours.

pyhf's default parameter bounds (+-5 for normsys / histosys, (1e-10, 10) for
staterror) make MINUIT fit in its sine-transformed internal parameters, and its
external errors are then 0.3-0.5 % smaller than the inverse Hessian (measured: the
same fit in plain iminuit agrees with ours to 1e-5 unbounded, not with the bounds). The
reference fit therefore runs with bounds wide enough to be inert."""

from __future__ import annotations

import numpy as np
import pyhf
import pytest

from analysis import likelihood as lk
from tests.likelihood.test_pyhf import random_case


def pyhf_fit(section):
    """``{pyhf parameter: (value, uncertainty)}`` of pyhf's mu = 0 fit (MIGRAD + HESSE)
    to the workspace's observations (the Asimov data of the section)."""
    pyhf.set_backend("numpy", pyhf.optimize.minuit_optimizer(strategy=1, tolerance=1e-6))
    ws = pyhf.Workspace(lk.pyhf_workspace(section))
    model = ws.model(modifier_settings={"normsys": {"interpcode": "code1"},
                                        "histosys": {"interpcode": "code4p"}})
    cfg = model.config
    wide = [(-100.0, 100.0)] * len(cfg.suggested_bounds())
    pars = pyhf.infer.mle.fixed_poi_fit(0.0, ws.data(model), model, par_bounds=wide,
                                        return_uncertainties=True)
    pars = np.asarray(pars)
    out = {}
    for name in model.config.par_order:
        sl = model.config.par_slice(name)
        out[name] = (pars[sl, 0], pars[sl, 1])
    return out


def ours_in_pyhf_terms(section, states, model):
    """Our fitted nuisances and uncertainties in pyhf's parameters: the MC-statistics
    ``theta`` of bin i is pyhf's ``gamma = 1 + sigma_i theta``."""
    widths = lk.mc_stat_widths(lk.templates(states, model), model)
    fit = section["fit"]
    out = {}
    for name, value in fit["nuisances"].items():
        sigma = fit["uncertainties"][name]
        if name.startswith("mc_stat_"):
            ch, i = name[len("mc_stat_"):-1].split("[")
            w = float(widths[ch][int(i)])
            out.setdefault(f"staterror_{ch}", []).append((1 + w * value, w * sigma))
        else:
            out[name] = (value, sigma)
    return {k: (np.array([a for a, _ in v]), np.array([b for _, b in v]))
            if isinstance(v, list) else v for k, v in out.items()}


@pytest.mark.parametrize("case", [dict(channels=("sr",), nbins=3),
                                  dict(channels=("sr", "cr"), nbins=4, bump=0.3,
                                       signal=(10.0, 30.0))],
                         ids=["1ch", "2ch-pulled"])
def test_postfit_uncertainties_are_minuit_hesse(case):
    states, model = random_case(7, **case)
    result = lk.significance(states, model)
    lk.raise_for_fit(result.fit, step="test")
    section = lk.results_section(states, model, result)
    ours = ours_in_pyhf_terms(section, states, model)
    ref = pyhf_fit(section)
    assert set(ours) == set(ref) - {"mu"}
    pulled = max(abs(v) for v in section["fit"]["nuisances"].values())
    assert pulled > 0.3  # a fit that moves, not the prior
    for name, (value, sigma) in ours.items():
        rvalue, rsigma = ref[name]
        np.testing.assert_allclose(value, rvalue, atol=2e-4, err_msg=name)
        np.testing.assert_allclose(sigma, rsigma, rtol=1e-3, err_msg=name)
    # constrained by the data: some post-fit uncertainty well below the prior's 1
    assert min(section["fit"]["uncertainties"].values()) < 0.9
    assert "background-only fit (mu = 0)" in section["fit"]["description"]


def test_no_nuisances_no_covariance():
    states, model = random_case(3, channels=("sr",), nbins=2, mc_stat=False)
    model = lk.Model([lk.Channel("sr", "sr")], ["sig"], mc_stat=False)
    tmpl = lk.templates(states, model)
    cov = lk.fit_covariance(tmpl, model, lk.asimov(tmpl, model), 0.0, np.zeros(0))
    assert cov.shape == (0, 0)
