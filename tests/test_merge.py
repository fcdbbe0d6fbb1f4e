"""Merging moment states across chunks: numerical stability and algebraic properties.

1. 100 chunks of ``1e6 + N(0, 1)`` merged (directly with ``merge_moments`` on
   ``_core.moments`` states, and through ``DatasetState`` chunks of an event-level
   observable) give var, skew and kurtosis within 1e-9 relative of a float64
   corrected two-pass computation on the concatenation.
2. Hypothesis properties of ``merge_moments`` / ``merge_comoments`` on ``Dual``
   states with gradients and Hessians: associativity, commutativity, the empty
   state as identity, any split of a sample merging back to the whole, and
   invariance of the statistics under a common rescaling of the weights.
3. ``Dual`` arithmetic against ``jax.jacfwd`` / ``jax.hessian``.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.columns import ChunkColumns
from analysis.config import config_from_dict
from analysis.kernel import chunk_state
from analysis.plan import build_plan
from analysis.results import dataset_report
from analysis.stats import _core
from analysis.stats.merge import Dual, merge_comoments, merge_moments

# --- 1. numerical stability -------------------------------------------------------------


def _big_chunks(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [1e6 + rng.standard_normal(n) for n in rng.integers(100, 3000, 100)]


def _central_moments(x: np.ndarray) -> tuple[Any, Any, Any]:
    """Corrected two-pass: centre on the rounded mean, then remove the residual mean
    ``r`` of the deviations before taking powers (works for float64 and long double)."""
    d = x - x.mean()
    e = d - d.mean()
    return (e**2).mean(), (e**3).mean(), (e**4).mean()


def _plain_two_pass(x: np.ndarray) -> tuple[Any, Any, Any]:
    d = x - x.mean()
    return (d**2).mean(), (d**3).mean(), (d**4).mean()


def _shape(m2: Any, m3: Any, m4: Any) -> dict[str, float]:
    return {"var": float(m2), "skew": float(m3 / m2**1.5), "kurtosis": float(m4 / m2**2 - 3)}


@pytest.fixture(scope="module")
def big_reference() -> dict[str, float]:
    x = np.concatenate(_big_chunks())
    ref = _central_moments(x)
    # The reference itself, against the same algorithm in long double: agrees to
    # ~3e-14 on M3. Plain two-pass float64 (no residual-mean correction) is off by
    # 4.2e-8 on M3 for this sample: the rounded float64 mean is ~1e-10 from the
    # true one, which shifts M3 by 3 * 1e-10 * M2 while M3 itself is only
    # ~0.007 * M2 (a Gaussian's sample skewness). A long-double *plain* two-pass
    # is not good enough either (2.5e-11: its mean is still rounded), hence the
    # corrected algorithm for both.
    ld = _central_moments(x.astype(np.longdouble))
    for ours, exact in zip(ref, ld, strict=True):
        assert abs(ours - exact) <= 1e-12 * abs(exact)
    plain_m3 = _plain_two_pass(x)[1]
    assert abs(plain_m3 - ld[1]) > 1e-8 * abs(ld[1])
    return _shape(*ref)


def _assert_shape_close(got: dict[str, float], want: dict[str, float]) -> None:
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=0), key


def test_merge_moments_of_big_values_is_stable(big_reference) -> None:
    # Zero-weight padding to one length: one compilation instead of one per chunk size.
    moments = jax.jit(_core.moments)
    states = []
    for c in _big_chunks():
        x, w = np.zeros(4096), np.zeros(4096)
        x[: len(c)], w[: len(c)] = c, 1.0
        states.append(tuple(np.asarray(v) for v in moments(x, w)))
    # Left fold, and a balanced tree: both orders must be exact.
    folded = reduce(merge_moments, states)
    tree = states
    while len(tree) > 1:
        tree = [merge_moments(*tree[i : i + 2]) if i + 1 < len(tree) else tree[i] for i in range(0, len(tree), 2)]
    for merged in (folded, tree[0]):
        s = _core.Moments(*(jnp.asarray(v) for v in merged))
        got = {
            "var": float(_core.state_var(s)),
            "skew": float(_core.state_skew(s)),
            "kurtosis": float(_core.state_kurtosis(s)),
        }
        _assert_shape_close(got, big_reference)


def test_dataset_state_chunks_of_big_values_are_stable(big_reference) -> None:
    config = config_from_dict(
        {
            "datasets": {"big": {"files": ["unused.root"]}},
            "observables": [{"name": "x", "x": "x", "stats": ["var", "skew", "kurtosis"]}],
        }
    )
    plan = build_plan(config)
    states = [
        chunk_state(
            ChunkColumns(n_events=len(c), weight=np.ones(len(c)), events={"x": c}),
            plan,
            np.zeros(0),
            np.zeros(0),
        )
        for c in _big_chunks()
    ]
    merged = reduce(lambda a, b: a + b, states)
    report = dataset_report(merged, plan)
    assert report["chunks"] == 100
    got = {k: v["value"] for k, v in report["observables"]["x"].items()}
    _assert_shape_close(got, big_reference)


# --- 2. properties of merging, with derivatives ------------------------------------------

N_MAX = 12  # samples are padded (zero weight) to this length: one compilation


@jax.jit
def _states(x, y, base, t, offset):
    """Moments/co-moments of a weighted sample whose weights depend on 2 parameters
    (soft cuts on x and y), with their Jacobian and Hessian."""

    def f(t):
        w = base * jax.nn.sigmoid(x - offset - t[0]) * jax.nn.sigmoid(t[1] - y)
        return _core.moments(x, w), _core.comoments(x, y, w)

    return f(t), jax.jacfwd(f)(t), jax.jacfwd(jax.jacfwd(f))(t)


_CENTRES = {"moments": {"center"}, "comoments": {"center_x", "center_y"}}


def _duals(kind: str, value, jac, hess) -> tuple:
    """The merge representation: Duals, except the constant centres."""
    out = []
    for field, v, j, h in zip(value._fields, value, jac, hess, strict=True):
        out.append(np.asarray(v) if field in _CENTRES[kind] else Dual(v, j, h))
    return tuple(out)


def sample_states(x, y, base, offset: float, t=(0.3, -0.2)) -> tuple[tuple, tuple]:
    n = len(x)
    assert n <= N_MAX
    pad = N_MAX - n
    xs = np.concatenate([np.asarray(x, dtype=float), np.zeros(pad)]) + offset
    ys = np.concatenate([np.asarray(y, dtype=float), np.zeros(pad)])
    bs = np.concatenate([np.asarray(base, dtype=float), np.zeros(pad)])
    value, jac, hess = _states(xs, ys, bs, jnp.asarray(t, dtype=float), offset)
    return (
        _duals("moments", value[0], jac[0], hess[0]),
        _duals("comoments", value[1], jac[1], hess[1]),
    )


def canonical(state: tuple, kind: str) -> dict[str, np.ndarray]:
    """``{name: stacked value, gradient and Hessian}`` with the mean as centre + dmean."""
    fields = _core.Moments._fields if kind == "moments" else _core.CoMoments._fields
    named = dict(zip(fields, state, strict=True))
    out = {}
    for field, leaf in named.items():
        if field.startswith("center"):
            continue
        if field.startswith("dmean"):
            centre = named["center" + field[len("dmean") :]]
            leaf = Dual(leaf.value + centre, leaf.grad, leaf.hess)
        out[field] = np.concatenate([[leaf.value], leaf.grad.ravel(), leaf.hess.ravel()])
    return out


def natural_scales(x, y, w, offset: float) -> dict[str, float]:
    """Magnitudes the rounding of each state (and of its derivatives, whose weight
    derivatives are bounded by the weights: sigmoid' <= sigmoid) is relative to."""
    x, y, w = np.asarray(x) + offset, np.asarray(y), np.asarray(w)
    sw = w.sum()
    if sw == 0:
        return dict.fromkeys(("sumw", "dmean", "dmean_x", "dmean_y", "m2", "m3", "m4", "cxx", "cyy", "cxy"), 0.0)
    # Deviations are never smaller than the rounding of the mean itself.
    dx = np.abs(x - (w * x).sum() / sw) + 1e-12 * np.abs(x).max() + 1e-300
    dy = np.abs(y - (w * y).sum() / sw) + 1e-12 * np.abs(y).max() + 1e-300
    sxx, syy = (w * dx**2).sum(), (w * dy**2).sum()
    return {
        "sumw": sw,
        "dmean": np.abs(x).max() + dx.max(),
        "dmean_x": np.abs(x).max() + dx.max(),
        "dmean_y": np.abs(y).max() + dy.max(),
        "m2": sxx,
        "m3": (w * dx**3).sum(),
        "m4": (w * dx**4).sum(),
        "cxx": sxx,
        "cyy": syy,
        "cxy": np.sqrt(sxx * syy),
    }


def assert_states_close(a: tuple, b: tuple, kind: str, scales: dict[str, float], rtol: float = 1e-10) -> None:
    ca, cb = canonical(a, kind), canonical(b, kind)
    for key in ca:
        # Derivatives carry factors of up to ~k^2 (moment order, two derivatives).
        atol = rtol * 20 * scales[key]
        np.testing.assert_allclose(ca[key], cb[key], rtol=rtol, atol=atol, err_msg=f"{kind}.{key}")


def _merge(kind: str):
    return merge_moments if kind == "moments" else merge_comoments


_value = st.floats(-3, 3, allow_nan=False, allow_infinity=False)
_weight = st.floats(0.05, 20, allow_nan=False, allow_infinity=False)
_row = st.tuples(_value, _value, _weight)


@st.composite
def samples(draw, min_size: int = 0, max_size: int = N_MAX):
    rows = draw(st.lists(_row, min_size=min_size, max_size=max_size))
    x, y, w = (list(col) for col in zip(*rows, strict=True)) if rows else ([], [], [])
    return x, y, w


_offsets = st.sampled_from([0.0, 50.0, 1e4])
_kinds = st.sampled_from(["moments", "comoments"])
_settings = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _index(kind: str) -> int:
    return 0 if kind == "moments" else 1


@_settings
@given(samples(), samples(), samples(), _offsets, _kinds)
def test_merge_is_associative(a, b, c, offset, kind) -> None:
    sa, sb, sc = (sample_states(*s, offset)[_index(kind)] for s in (a, b, c))
    merge = _merge(kind)
    left = merge(merge(sa, sb), sc)
    right = merge(sa, merge(sb, sc))
    whole = [sum((s[i] for s in (a, b, c)), []) for i in range(3)]
    assert_states_close(left, right, kind, natural_scales(*whole, offset))


@_settings
@given(samples(), samples(), _offsets, _kinds)
def test_merge_is_commutative(a, b, offset, kind) -> None:
    sa, sb = (sample_states(*s, offset)[_index(kind)] for s in (a, b))
    merge = _merge(kind)
    whole = [a[i] + b[i] for i in range(3)]
    assert_states_close(merge(sa, sb), merge(sb, sa), kind, natural_scales(*whole, offset))


@_settings
@given(samples(), _offsets, _kinds)
def test_empty_state_is_identity(a, offset, kind) -> None:
    sa = sample_states(*a, offset)[_index(kind)]
    empty = sample_states([], [], [], offset)[_index(kind)]
    assert float(empty[0].value) == 0.0
    merge = _merge(kind)
    for merged in (merge(sa, empty), merge(empty, sa)):
        ca, cm = canonical(sa, kind), canonical(merged, kind)
        for key in ca:
            np.testing.assert_array_equal(cm[key], ca[key], err_msg=key)


@_settings
@given(samples(min_size=1), st.data(), _offsets, _kinds)
def test_any_split_merges_to_the_whole(whole, data, offset, kind) -> None:
    n = len(whole[0])
    cut = data.draw(st.integers(0, n), label="cut")
    head = [col[:cut] for col in whole]
    tail = [col[cut:] for col in whole]
    i = _index(kind)
    merged = _merge(kind)(sample_states(*head, offset)[i], sample_states(*tail, offset)[i])
    assert_states_close(merged, sample_states(*whole, offset)[i], kind, natural_scales(*whole, offset))


def _statistics(mom: tuple, com: tuple) -> dict[str, float]:
    m = _core.Moments(*(jnp.asarray(getattr(v, "value", v)) for v in mom))
    c = _core.CoMoments(*(jnp.asarray(getattr(v, "value", v)) for v in com))
    fit = _core.state_linear_fit(c)
    out = {name: float(fn(m)) for name, fn in _core.UNIVARIATE.items()}
    out.update({name: float(_core.BIVARIATE[name](c)) for name in ("covar", "corr")})
    out.update({f"fit_{k}": float(v) for k, v in fit.items()})
    return out


@_settings
@given(samples(min_size=3), st.data(), st.floats(1e-3, 1e3), _offsets)
def test_statistics_are_invariant_under_weight_scaling(whole, data, c, offset) -> None:
    x, y, w = whole
    x = [xi + 0.1 * i for i, xi in enumerate(x)]  # never constant: every statistic defined
    y = [yi - 0.07 * i for i, yi in enumerate(y)]
    cut = data.draw(st.integers(0, len(x)), label="cut")

    def merged(weights):
        parts = [sample_states(x[s], y[s], weights[s], offset) for s in (slice(0, cut), slice(cut, None))]
        return merge_moments(parts[0][0], parts[1][0]), merge_comoments(parts[0][1], parts[1][1])

    mom, com = merged(w)
    mom_c, com_c = merged([c * wi for wi in w])
    # The states scale with c (sums of weights) or not at all (means), derivatives included.
    scales = natural_scales(x, y, w, offset)
    for kind, a, b in (("moments", mom, mom_c), ("comoments", com, com_c)):
        ca, cb = canonical(a, kind), canonical(b, kind)
        for key in ca:
            factor = 1.0 if key.startswith("dmean") else c
            np.testing.assert_allclose(
                cb[key], factor * ca[key], rtol=1e-10, atol=1e-10 * 20 * factor * scales[key], err_msg=key
            )
    stats, stats_c = _statistics(mom, com), _statistics(mom_c, com_c)
    magnitude = _statistic_magnitudes(np.asarray(x) + offset, np.asarray(y), np.asarray(w))
    for key, value in stats.items():
        want = value
        if key in ("fit_intercept_error", "fit_slope_error"):
            want = value / np.sqrt(c)  # ak.linear_fit: weights enter linearly, errors ~ 1/sqrt(sum w)
        assert stats_c[key] == pytest.approx(want, rel=1e-9, abs=1e-9 * magnitude[key]), key


def _statistic_magnitudes(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, float]:
    """The scale each statistic's rounding error is relative to: a statistic that is
    a small difference (an intercept near 0, the skew of a symmetric sample) is
    compared on the scale of its terms, not its own."""
    sw = w.sum()
    mx, my = (w * x).sum() / sw, (w * y).sum() / sw
    sx, sy = np.sqrt((w * (x - mx) ** 2).sum() / sw), np.sqrt((w * (y - my) ** 2).sum() / sw)
    slope = sy / sx
    return {
        "mean": float(np.abs(x).max()),
        "var": sx**2,
        "std": sx,
        "skew": 1.0,
        "kurtosis": 1.0,
        "covar": sx * sy,
        "corr": 1.0,
        "fit_intercept": abs(my) + slope * abs(mx) + sy,
        "fit_slope": slope,
        "fit_intercept_error": 0.0,
        "fit_slope_error": 0.0,
    }


# --- 3. Dual arithmetic -----------------------------------------------------------------


def _expression(a, b):
    """A rational expression using every Dual operation the merges use."""
    return (a * b - a**3 + 2.0) / (b * b + 1.0) - 3.0 * a + (1.5 - b) * 2.0 - b / 4.0


def _inputs(t):
    return jnp.stack([t[0] * t[1] + jnp.sin(t[2]), t[0] - 2 * t[1] ** 2 + t[2]])


def _composed(t):
    a, b = _inputs(t)
    return _expression(a, b)


@jax.jit
def _jax_reference(t):
    """Inputs with their derivatives, and the expression's derivatives, all by JAX."""
    inputs = (_inputs(t), jax.jacfwd(_inputs)(t), jax.hessian(_inputs)(t))
    return inputs, (_composed(t), jax.grad(_composed)(t), jax.hessian(_composed)(t))


@settings(max_examples=30, deadline=None)
@given(st.tuples(st.floats(-2, 2), st.floats(-2, 2), st.floats(-2, 2)))
def test_dual_arithmetic_matches_jax(t) -> None:
    (v, j, h), (f, grad, hess) = _jax_reference(jnp.asarray(t))
    got = _expression(Dual(v[0], j[0], h[0]), Dual(v[1], j[1], h[1]))
    np.testing.assert_allclose(got.value, f, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.grad, grad, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got.hess, hess, rtol=1e-9, atol=1e-9)


def test_dual_reciprocal_of_zero_is_zero_with_zero_derivatives() -> None:
    zero = Dual(0.0, [1.0, 2.0], [[1.0, 0.0], [0.0, 1.0]])
    inv = zero.reciprocal()
    assert inv.value == 0.0
    assert np.all(inv.grad == 0.0) and np.all(inv.hess == 0.0)
