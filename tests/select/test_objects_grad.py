"""Gradients of soft object quantities against central finite differences.

Small random events (jets with b-tag, muons, electrons); trainable jet pT, b-tag and
lepton pT thresholds with soft widths; outputs: expected selected sum of weights, HT,
and weighted sums of the leading-jet pT, the dijet and trijet masses and m(l b).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import analysis  # noqa: F401  (float64)
from analysis.select.fourvec import P4, add, total
from analysis.select.objects import (
    Count,
    CountModel,
    event_pass,
    layout,
    leading,
    object_weights,
    soft_pass,
    take,
)
from tests.conftest import AGC_SETS, central_difference

SETS = AGC_SETS
MODEL = CountModel(
    SETS,
    (
        Count(("jets",), ">=", 3),
        Count(("bjets",), ">=", 1),
        Count(("muons", "electrons"), "==", 2),
    ),
)
M = {"Jet": 6, "Muon": 2, "Electron": 2}


def events(seed: int = 3, n: int = 12):
    rng = np.random.default_rng(seed)
    counts = {c: rng.integers(max(0, m - 3), m + 1, n) for c, m in M.items()}
    lays = {c: layout(np.cumsum(k) - k, k, M[c]) for c, k in counts.items()}
    cols = {}
    for c, m in M.items():
        cols[c] = {
            "pt": jnp.asarray(rng.uniform(15, 90, (n, m))),
            "eta": jnp.asarray(rng.uniform(-2.5, 2.5, (n, m))),
            "phi": jnp.asarray(rng.uniform(-np.pi, np.pi, (n, m))),
            "mass": jnp.asarray(rng.uniform(0, 12, (n, m))),
            "btag": jnp.asarray(rng.uniform(0, 1, (n, m))),
        }
    return lays, cols


@functools.cache
def data():
    """:func:`events` built on first use, not at import (``jnp.asarray`` and the layouts
    compile JAX programs, which every test process paid while collecting this file, whose
    only test is slow). Eager even when first asked for inside ``outputs``' trace: the
    cached arrays are constants, never tracers."""
    with jax.ensure_compile_time_eval():
        return events()


@jax.jit
def outputs(theta):
    lays, cols = data()
    jet_pt, btag, lep_pt = theta[0], theta[1], theta[2]
    jet, mu, el = cols["Jet"], cols["Muon"], cols["Electron"]
    probs = {
        "jets": soft_pass(jet["pt"], jet_pt, 5.0, greater=True, inclusive=False),
        "bjets": soft_pass(jet["btag"], btag, 0.05, greater=True, inclusive=False),
        "muons": soft_pass(mu["pt"], lep_pt, 2.0, greater=True, inclusive=False),
        "electrons": soft_pass(el["pt"], lep_pt, 2.0, greater=True, inclusive=False),
    }
    th = jnp.asarray([3.0, 1.0, 1.0])
    p = event_pass(probs, lays, MODEL, th)
    w = object_weights(probs, lays, MODEL, th)
    rank = {"jets": jet["pt"], "bjets": jet["pt"], "muons": mu["pt"]}

    def vec(coll, ix):
        return P4(*(take(cols[coll][f], ix) for f in ("pt", "eta", "phi", "mass")))

    (j0,), w1 = leading(probs, lays, MODEL, th, [("jets", 0)], rank)
    (a, b, c), w3 = leading(probs, lays, MODEL, th, [("jets", 0), ("jets", 1), ("jets", 2)], rank)
    (m0, b0), wlb = leading(probs, lays, MODEL, th, [("muons", 0), ("bjets", 0)], rank)
    return jnp.stack(
        [
            jnp.sum(p),
            jnp.sum(w["jets"] * jet["pt"]),
            jnp.sum(w["bjets"] * jet["eta"]),
            jnp.sum(w1 * vec("Jet", j0).pt),
            jnp.sum(w3 * add(vec("Jet", a), vec("Jet", b)).mass),
            jnp.sum(w3 * total(vec("Jet", a), vec("Jet", b), vec("Jet", c)).mass),
            jnp.sum(wlb * add(vec("Muon", m0), vec("Jet", b0)).mass),
        ]
    )


@pytest.mark.slow  # three compilations (values, jacfwd, jacrev): ~30 s on a loaded machine
def test_gradients_match_central_differences():
    theta = np.array([40.0, 0.5, 30.0])
    jac = np.asarray(jax.jit(jax.jacfwd(outputs))(jnp.asarray(theta)))
    fd = central_difference(
        lambda t: np.asarray(outputs(jnp.asarray(t))), theta, [1e-2, 1e-4, 1e-2], points=5
    )
    assert np.all(np.abs(jac) > 1e-8)  # every output depends on every threshold
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-9)
    rev = np.asarray(jax.jit(jax.jacrev(outputs))(jnp.asarray(theta)))
    np.testing.assert_allclose(rev, jac, rtol=1e-12, atol=1e-12)
