"""The binned likelihood against pyhf on the same templates and modifiers (normsys code1
with symmetric factors, histosys code4p, staterror), and against closed forms."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pyhf
import pytest

from analysis import likelihood as lk
from analysis import stats


def hist_state(sumw, sumw2=None, edges=None):
    """A Histogram of in-range bins (zero flow) from arrays."""
    sumw = np.asarray(sumw, dtype=np.float64)
    sumw2 = np.zeros_like(sumw) if sumw2 is None else np.asarray(sumw2, dtype=np.float64)
    edges = list(range(sumw.size + 1)) if edges is None else edges
    return stats.Histogram(edges, np.r_[0.0, sumw, 0.0], np.r_[0.0, sumw2, 0.0])


def random_case(
    seed, *, channels=("sr", "cr"), nbins=4, mc_stat=True, bump=0.5, signal=(2.0, 12.0)
):
    """States of a signal and two backgrounds, two shape systematics (one a signal-like
    bump in the background, pulled beyond |theta| = 1 by the mu = 0 fit), two lnN."""
    rng = np.random.default_rng(seed)
    states = {"sig": {}, "ttbar": {}, "dy": {}}
    chans = []
    for c in channels:
        s = rng.uniform(*signal, nbins)
        b1 = rng.uniform(20.0, 80.0, nbins)
        b2 = rng.uniform(5.0, 30.0, nbins)
        for ds, nom in (("sig", s), ("ttbar", b1), ("dy", b2)):
            states[ds][f"{c}"] = hist_state(nom, nom * rng.uniform(0.02, 0.2, nbins))
            up = nom * (1 + rng.uniform(0.01, 0.08, nbins))
            down = nom * (1 - rng.uniform(0.0, 0.06, nbins))
            states[ds][f"{c}_jes_up"], states[ds][f"{c}_jes_down"] = (
                hist_state(up),
                hist_state(down),
            )
            shift = bump * s if (bump and ds == "ttbar") else 0.02 * nom
            states[ds][f"{c}_bump_up"] = hist_state(nom + shift)
            states[ds][f"{c}_bump_down"] = hist_state(nom - 0.6 * shift)
        chans.append(
            lk.Channel(
                c,
                c,
                {
                    "jes": (f"{c}_jes_up", f"{c}_jes_down"),
                    "bump": (f"{c}_bump_up", f"{c}_bump_down"),
                },
            )
        )
    model = lk.Model(
        chans,
        ["sig"],
        [
            lk.Normalisation("dy_norm", ["dy"], 1.25),
            lk.Normalisation("lumi", ["sig", "ttbar", "dy"], 1.03),
        ],
        mc_stat=mc_stat,
    )
    return states, model


def pyhf_model(states, model):
    """The same model written as a pyhf workspace spec."""
    tmpl = lk.templates(states, model)
    spec = {"channels": []}
    for c in model.channels:
        samples = []
        for ds, t in tmpl[c.name].items():
            mods = []
            if ds in model.signal:
                mods.append({"name": "mu", "type": "normfactor", "data": None})
            if model.mc_stat:
                mods.append(
                    {
                        "name": f"staterror_{c.name}",
                        "type": "staterror",
                        "data": np.sqrt(t["nominal"]["sumw2"]).tolist(),
                    }
                )
            for s, v in t["variations"].items():
                data = {
                    "hi_data": np.asarray(v["up"]).tolist(),
                    "lo_data": np.asarray(v["down"]).tolist(),
                }
                mods.append({"name": s, "type": "histosys", "data": data})
            for n in model.normalisations:
                if ds in n.datasets:
                    mods.append(
                        {
                            "name": n.name,
                            "type": "normsys",
                            "data": {"hi": n.kappa, "lo": 1 / n.kappa},
                        }
                    )
            samples.append(
                {"name": ds, "data": np.asarray(t["nominal"]["sumw"]).tolist(), "modifiers": mods}
            )
        spec["channels"].append({"name": c.name, "samples": samples})
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer(tolerance=1e-14))
    settings = {"normsys": {"interpcode": "code1"}, "histosys": {"interpcode": "code4p"}}
    return pyhf.Model(spec, modifier_settings=settings, poi_name="mu")


def pyhf_asimov(m):
    return m.expected_data(m.config.suggested_init())  # mu = 1, nominal nuisances and aux


def pyhf_z(m):
    cfg = m.config
    q0 = pyhf.infer.test_statistics.q0(
        0.0, pyhf_asimov(m), m, cfg.suggested_init(), cfg.suggested_bounds(), cfg.suggested_fixed()
    )
    return math.sqrt(float(q0))


CASES = {
    "1ch-3bins": dict(channels=("sr",), nbins=3),
    "2ch-4bins": dict(channels=("sr", "cr"), nbins=4),
    "2ch-no-mc-stat": dict(channels=("sr", "cr"), nbins=4, mc_stat=False),
    "1ch-6bins-no-bump": dict(channels=("sr",), nbins=6, bump=0.0),
    "2ch-pulled-beyond-1": dict(channels=("sr", "cr"), nbins=4, bump=0.3, signal=(10.0, 30.0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_significance_equals_pyhf(case):
    states, model = random_case(7, **CASES[case])
    result = lk.significance(states, model)
    lk.raise_for_fit(result.fit, step="test")
    ref = pyhf_z(pyhf_model(states, model))
    assert abs(float(result.z) - ref) < 1e-6, (float(result.z), ref)
    assert float(result.z) > 0.5


def test_fit_is_in_the_extrapolation_region():
    """The bump nuisance is pulled beyond 1 sigma: code4p's linear extrapolation is tested."""
    states, model = random_case(7, **CASES["2ch-pulled-beyond-1"])
    fit = lk.significance(states, model).fit
    names = lk.nuisance_names(lk.templates(states, model), model)
    pulls = dict(zip(names, np.asarray(fit.nuisances), strict=True))
    assert abs(pulls["bump"]) > 1.0, pulls


def test_mu_uncertainty_equals_pyhf_profile_curvature():
    """sigma_mu^2 = 2 h^2 / (q(1 + h) + q(1 - h)), q(mu) = pyhf's profiled -2 ln(L(mu) / L(1))."""
    states, model = random_case(11, channels=("sr", "cr"), nbins=4)
    m = pyhf_model(states, model)
    data, cfg = pyhf_asimov(m), m.config

    def twice_nll(mu):
        _, val = pyhf.infer.mle.fixed_poi_fit(
            mu,
            data,
            m,
            cfg.suggested_init(),
            cfg.suggested_bounds(),
            cfg.suggested_fixed(),
            return_fitted_val=True,
        )
        return float(val)

    h = 1e-3
    base = twice_nll(1.0)
    ref = math.sqrt(2 * h * h / (twice_nll(1 + h) + twice_nll(1 - h) - 2 * base))
    got = float(lk.mu_uncertainty(states, model))
    assert abs(got - ref) < 1e-5 * ref, (got, ref)


def test_unconditional_fit_on_asimov_is_nominal():
    """The skipped free fit: minimising over (mu, theta) on the Asimov data finds (1, 0)."""
    states, model = random_case(3, channels=("sr", "cr"), nbins=4)
    tmpl = lk.templates(states, model)
    data = lk.asimov(tmpl, model)
    n = len(lk.nuisance_names(tmpl, model))
    start = jnp.concatenate([jnp.array([0.3]), jnp.full(n, 0.2)])
    sol = optx.minimise(
        lambda p, _: lk.nll(tmpl, model, data, p[0], p[1:]),
        optx.BFGS(rtol=1e-12, atol=1e-12),
        start,
        max_steps=2000,
    )
    np.testing.assert_allclose(np.asarray(sol.value), np.r_[1.0, np.zeros(n)], atol=1e-6)


def _one_bin(s, b, sigma, *, via):
    if via == "shape":  # symmetric histosys: b + sigma theta exactly (code4p is linear then)
        states = {
            "sig": {"h": hist_state([s]), "up": hist_state([s]), "down": hist_state([s])},
            "bkg": {
                "h": hist_state([b]),
                "up": hist_state([b + sigma]),
                "down": hist_state([b - sigma]),
            },
        }
        return states, lk.Model(
            [lk.Channel("sr", "h", {"unc": ("up", "down")})], ["sig"], mc_stat=False
        )
    # staterror: gamma = 1 + r theta with r = sqrt(sigma^2) / (s + b); at mu = 0 the
    # background b gamma has the Gaussian width b r
    states = {"sig": {"h": hist_state([s], [0.0])}, "bkg": {"h": hist_state([b], [sigma**2])}}
    return states, lk.Model([lk.Channel("sr", "h")], ["sig"], mc_stat=True)


def closed_form_z(s, b, sigma):
    """One bin, n = s + b, background b' ~ N(b, sigma): minimise b' - n ln b' + (b' - b)^2
    / (2 sigma^2); the minimum solves b'^2 + (sigma^2 - b) b' - n sigma^2 = 0."""
    n = s + b
    bp = 0.5 * ((b - sigma**2) + math.sqrt((b - sigma**2) ** 2 + 4 * n * sigma**2))
    q0 = 2 * ((bp - n * math.log(bp) + (bp - b) ** 2 / (2 * sigma**2)) - (n - n * math.log(n)))
    return math.sqrt(q0)


@pytest.mark.parametrize(
    ("s", "b", "sigma"), [(5.0, 20.0, 3.0), (12.0, 100.0, 15.0), (3.0, 4.0, 0.5)]
)
@pytest.mark.parametrize("via", ["shape", "mc_stat"])
def test_one_bin_closed_form(s, b, sigma, via):
    states, model = _one_bin(s, b, sigma, via=via)
    width = sigma if via == "shape" else b * sigma / (s + b)
    got = float(lk.discovery_significance(states, model))
    assert abs(got - closed_form_z(s, b, width)) < 1e-6, (got, closed_form_z(s, b, width))
    # no uncertainty at all: Z = sqrt(2 ((s + b) ln(1 + s / b) - s))
    exact = math.sqrt(2 * ((s + b) * math.log(1 + s / b) - s))
    bare = lk.Model([lk.Channel("sr", "h")], ["sig"], mc_stat=False)
    assert abs(float(lk.discovery_significance(states, bare)) - exact) < 1e-10
