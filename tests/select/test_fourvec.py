"""analysis.select.fourvec against vector's own awkward behaviour (``Momentum4D``), 1e-12.

Random vectors in NanoAOD ranges, plus the undefined points (zero pt, zero sum,
identical directions): values equal vector's (including inf), gradients are finite.
"""

from __future__ import annotations

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import vector

import analysis  # noqa: F401  (float64)
from analysis.select.fourvec import P4, add, delta_phi, delta_r, total

vector.register_awkward()


def random_p4(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "pt": rng.uniform(0.5, 300.0, n),
        "eta": rng.uniform(-4.0, 4.0, n),
        "phi": rng.uniform(-np.pi, np.pi, n),
        "mass": rng.uniform(0.0, 50.0, n),
    }


def edge_p4() -> list[dict[str, np.ndarray]]:
    """Columns of three vectors a, b, c hitting vector's special cases."""
    a = {
        "pt": np.array([0.0, 10.0, 5.0, 30.0, 0.0, 20.0]),
        "eta": np.array([0.0, 1.0, 0.3, -1.0, 0.0, 0.5]),
        "phi": np.array([0.0, 0.5, 1.0, 3.1, 0.0, -3.1]),
        "mass": np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0]),
    }
    b = {  # back to back with a (zero sum pt), identical to a, massless collinear...
        "pt": np.array([0.0, 10.0, 5.0, 30.0, 0.0, 20.0]),
        "eta": np.array([0.0, 1.0, 0.3, -1.0, 2.0, 0.5]),
        "phi": np.array([0.0, 0.5 - np.pi, 1.0, -3.1, 0.0, -3.1]),
        "mass": np.array([0.0, 0.0, 1.0, 0.0, 3.0, 0.0]),
    }
    c = {k: np.zeros(6) for k in a}
    return [a, b, c]


def as_vector(cols: dict[str, np.ndarray]):
    return ak.zip({k: ak.Array(v) for k, v in cols.items()}, with_name="Momentum4D")


def as_p4(cols: dict[str, np.ndarray]) -> P4:
    return P4(*(jnp.asarray(cols[k]) for k in ("pt", "eta", "phi", "mass")))


def check(got, want, rtol=1e-12) -> None:
    got, want = np.asarray(got), ak.to_numpy(want)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=1e-12)


def check_mass(got, want, *, min_well: float) -> None:
    """Masses: 1e-12 relative where ``m^2 = t^2 - |p|^2`` is well conditioned
    (``t^2 / m^2 < 100``); elsewhere the cancellation amplifies one-ulp differences of
    XLA's and numpy's sin/exp by ``t^2 / m^2``, so ``m^2`` is compared to ``1e-14 t^2``."""
    m, t = np.asarray(got.mass), ak.to_numpy(want.t)
    w = ak.to_numpy(want.mass)
    well = t**2 < 100 * w**2
    assert well.mean() >= min_well
    np.testing.assert_allclose(m[well], w[well], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        np.sign(m) * m**2, np.sign(w) * w**2, rtol=0, atol=1e-14 * float(np.max(t**2))
    )


@pytest.mark.parametrize("case", ["random", "edges"])
def test_against_vector(case):
    if case == "random":
        rng = np.random.default_rng(5)
        a, b, c = (random_p4(rng, 2000) for _ in range(3))
    else:
        a, b, c = edge_p4()
    va, vb, vc = (as_vector(x) for x in (a, b, c))
    pa, pb, pc = (as_p4(x) for x in (a, b, c))
    s2, s3 = add(pa, pb), total(pa, pb, pc)
    r2, r3 = va + vb, va + vb + vc
    for got, want in ((s2, r2), (s3, r3)):
        check_mass(got, want, min_well=0.5 if case == "random" else 0.0)
        check(got.pt, want.pt)
        check(got.eta, want.eta)
        check(got.phi, want.phi)
    check(delta_r(pa, pb), va.deltaR(vb))
    check(delta_phi(pa, pb), va.deltaphi(vb))
    check(total(pa).mass, va.mass)


def test_gradients_finite_at_edges():
    a, b, c = edge_p4()
    x = jnp.stack([jnp.asarray(v[k]) for v in (a, b, c) for k in ("pt", "eta", "phi", "mass")])

    def f(x):
        pa, pb, pc = (P4(*x[4 * i : 4 * i + 4]) for i in range(3))
        s = total(pa, pb, pc)
        outs = (add(pa, pb).mass, s.mass, s.pt, s.phi, delta_r(pa, pb), delta_phi(pa, pb))
        # eta is +-inf where vector says so; its gradient must still be finite.
        eta = add(pa, pb).eta
        return sum(jnp.sum(o) for o in outs) + jnp.sum(jnp.where(jnp.isfinite(eta), eta, 0.0))

    g = jax.jit(jax.grad(f))(x)
    assert np.all(np.isfinite(np.asarray(g)))
    assert np.isfinite(np.asarray(f(x)))
