"""The awkward-issue reproducer: statistics of vector Momentum4D jets on awkward's JAX
backend, differentiated with ``jax.value_and_grad`` with respect to the jets.

The file is reached through ``skhep_testdata.data_path`` (offline: the test session
primes its cache from ``shared/data``, see ``conftest.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import awkward as ak
import jax
import numpy as np
import pytest
import skhep_testdata
import uproot
import vector

from analysis import stats

NAME = "nanoAOD_2015_CMS_Open_Data_ttbar.root"


@pytest.fixture(scope="module")
def jets() -> ak.Array:
    """Jets (pt, eta, phi, mass) of the events with >= 2 jets, as Momentum4D (numpy)."""
    vector.register_awkward()
    with uproot.open(skhep_testdata.data_path(NAME)) as f:
        ev = f["Events"].arrays(["nJet", "Jet_pt", "Jet_eta", "Jet_phi", "Jet_mass"])
    ev = ev[ev.nJet >= 2]
    assert len(ev) == 140
    return ak.zip(
        {"pt": ev.Jet_pt, "eta": ev.Jet_eta, "phi": ev.Jet_phi, "mass": ev.Jet_mass},
        with_name="Momentum4D",
    )


def _to_jax(array: ak.Array) -> ak.Array:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # awkward's JAX backend
        ak.jax.register_and_check()
        return ak.to_backend(array, "jax")


def test_mean_value_and_gradient(jets: ak.Array) -> None:
    jj = _to_jax(jets)
    assert jj.layout.is_list and not jj.layout.is_regular  # event mask: a ListArray
    value, grad = jax.value_and_grad(lambda j: stats.mean(j.pt))(jj)
    assert value == pytest.approx(float(ak.mean(jets.pt)), rel=1e-12)
    n = int(ak.count(jets.pt))
    g = ak.to_numpy(ak.flatten(ak.to_backend(grad.pt, "cpu")))
    assert g.shape == (n,)
    # d mean / d pt_i = 1/N exactly (in the float32 buffer's precision)
    np.testing.assert_array_equal(g, np.float32(1.0 / n))
    # the other fields do not enter
    for field in ("eta", "phi", "mass"):
        assert np.all(ak.to_numpy(ak.flatten(ak.to_backend(grad[field], "cpu"))) == 0)


def test_from_awkward_and_awkward_weights_under_grad(jets: ak.Array) -> None:
    """from_awkward inside jax.grad (the buffer is a tracer), and soft-cut weights
    computed with awkward's JAX backend from a traced threshold."""
    jj = _to_jax(jets)
    per_event = jax.grad(lambda j: jax.numpy.sum(stats.mean(stats.from_awkward(j.pt), axis=1)))
    g = ak.to_numpy(ak.flatten(ak.to_backend(per_event(jj).pt, "cpu")))
    counts = ak.to_numpy(ak.num(jets))
    np.testing.assert_allclose(g, np.repeat(1.0 / counts, counts).astype(np.float32))

    def soft_mean(c: jax.Array) -> jax.Array:
        weight = 1.0 / (1.0 + np.exp(-(jj.pt - c) / 5.0))  # an awkward JAX array
        return stats.mean(jj.pt, weight=weight)

    pt = stats.from_awkward(jets.pt)

    def soft_mean_jagged(c: jax.Array) -> jax.Array:
        return stats.mean(pt, weight=jax.nn.sigmoid((pt.values - c) / 5.0))

    c = jax.numpy.float64(30.0)
    np.testing.assert_allclose(soft_mean(c), soft_mean_jagged(c), rtol=1e-6)
    np.testing.assert_allclose(jax.grad(soft_mean)(c), jax.grad(soft_mean_jagged)(c), rtol=1e-5)


STATISTICS: dict[str, Callable[[ak.Array], object]] = {
    "var": lambda j: stats.var(j.pt),
    "std": lambda j: stats.std(j.pt, ddof=1),
    "moment": lambda j: stats.moment(j.pt, 3) * 1e-4,
    "covar": lambda j: stats.covar(j.pt, j.eta),
    "corr": lambda j: stats.corr(j.pt, j.eta),
    "linear_fit": lambda j: stats.linear_fit(j.pt, j.eta).slope * 1e3,
    # awkward inputs give awkward results: ak.to_jax (differentiable) before jnp.sum
    "var_per_event": lambda j: jax.numpy.sum(ak.to_jax(stats.var(j.pt, axis=1))),
}


def _with_pt(jets: ak.Array, flat_pt: np.ndarray) -> ak.Array:
    return ak.with_field(jets, ak.unflatten(flat_pt, ak.num(jets)), "pt")


@pytest.mark.parametrize("name", list(STATISTICS))
def test_gradients_match_finite_differences(jets: ak.Array, name: str) -> None:
    f = STATISTICS[name]
    jets64 = ak.values_astype(jets, np.float64)  # float64 for finite differences
    value, grad = jax.value_and_grad(f)(_to_jax(jets64))
    assert float(value) == pytest.approx(float(f(jets64)), rel=1e-12)
    g = ak.to_numpy(ak.flatten(ak.to_backend(grad.pt, "cpu")))
    assert np.all(np.isfinite(g))
    # directional derivatives along random perturbations of the flat pt buffer
    pt = ak.to_numpy(ak.flatten(jets64.pt))
    rng = np.random.default_rng(3)
    for _ in range(3):
        direction = rng.normal(size=pt.shape)
        h = 1e-3
        fd = (
            float(f(_with_pt(jets64, pt + h * direction)))
            - float(f(_with_pt(jets64, pt - h * direction)))
        ) / (2 * h)
        assert float(g @ direction) == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_reference_values(jets: ak.Array) -> None:
    """The same statistics as awkward's on the numpy backend."""
    jj = _to_jax(jets)
    pt64 = ak.values_astype(jets.pt, np.float64)
    eta64 = ak.values_astype(jets.eta, np.float64)
    pairs = [
        (stats.var(jj.pt), ak.var(pt64)),
        (stats.std(jj.pt), ak.std(pt64)),
        (stats.moment(jj.pt, 2), ak.moment(pt64, 2)),
        (stats.covar(jj.pt, jj.eta), ak.covar(pt64, eta64)),
        (stats.corr(jj.pt, jj.eta), ak.corr(pt64, eta64)),
        (stats.linear_fit(jj.pt, jj.eta).slope, ak.linear_fit(pt64, eta64).slope),
    ]
    for ours, ref in pairs:
        assert float(ours) == pytest.approx(float(ref), rel=1e-11)
    per_event = np.asarray(stats.mean(jj.pt, axis=1))
    np.testing.assert_allclose(per_event, ak.to_numpy(ak.mean(pt64, axis=1)), rtol=1e-13)
