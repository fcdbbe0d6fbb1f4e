"""Merging moment states across chunks: numerical stability and algebraic properties.

1. 100 chunks of ``1e6 + N(0, 1)`` merged (directly with ``merge_moments`` on
   ``_core.moments`` states, and through ``DatasetState`` chunks of an event-level
   observable) give var, skew and kurtosis within 1e-9 relative of a float64
   corrected two-pass computation on the concatenation.
2. Hypothesis properties of merging ``stats.Derived`` moment / co-moment states
   with gradients and Hessians (``a + b``: the JAX merge differentiated through the
   states' Taylor expansion): associativity, commutativity, the empty state as
   identity, any split of a sample merging back to the whole, and invariance of the
   statistics under a common rescaling of the weights.
3. The merged derivatives against ``jax.jacfwd`` / ``jax.hessian`` of the merge of
   the two chunks' states written as functions of the parameters.
"""

from __future__ import annotations

import operator
from functools import partial, reduce
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.config.loader import config_from_dict
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import build_plan
from analysis.pipeline.results import dataset_report
from analysis.stats import Derived, _core, _statefns
from analysis.stats.merge import merge_comoments, merge_moments

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
        tree = [
            merge_moments(*tree[i : i + 2]) if i + 1 < len(tree) else tree[i]
            for i in range(0, len(tree), 2)
        ]
    for merged in (folded, tree[0]):
        s = _core.Moments(*(jnp.asarray(v) for v in merged))
        got = {
            "var": float(_statefns.state_var(s)),
            "skew": float(_statefns.state_skew(s)),
            "kurtosis": float(_statefns.state_kurtosis(s)),
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


def sample_states(x, y, base, offset: float, t=(0.3, -0.2)) -> tuple[Derived, Derived]:
    n = len(x)
    assert n <= N_MAX
    pad = N_MAX - n
    xs = np.concatenate([np.asarray(x, dtype=float), np.zeros(pad)]) + offset
    ys = np.concatenate([np.asarray(y, dtype=float), np.zeros(pad)])
    bs = np.concatenate([np.asarray(base, dtype=float), np.zeros(pad)])
    value, jac, hess = _states(xs, ys, bs, jnp.asarray(t, dtype=float), offset)
    to_np = partial(jax.tree_util.tree_map, np.asarray)
    return tuple(
        Derived(("t0", "t1"), to_np(value[i]), to_np(jac[i]), to_np(hess[i])) for i in (0, 1)
    )


def canonical(state: Derived, kind: str) -> dict[str, np.ndarray]:
    """``{name: stacked value, gradient and Hessian}`` with the mean as centre + dmean."""
    fields = state.value._fields
    value, jac, hess = (dict(zip(fields, t, strict=True)) for t in state.taylor())
    out = {}
    for field in fields:
        if field.startswith("center"):
            continue
        v = value[field]
        if field.startswith("dmean"):
            v = v + value["center" + field[len("dmean") :]]
        out[field] = np.concatenate([[v], jac[field].ravel(), hess[field].ravel()])
    return out


def natural_scales(x, y, w, offset: float) -> dict[str, float]:
    """Magnitudes the rounding of each state (and of its derivatives, whose weight
    derivatives are bounded by the weights: sigmoid' <= sigmoid) is relative to."""
    x, y, w = np.asarray(x) + offset, np.asarray(y), np.asarray(w)
    sw = w.sum()
    if sw == 0:
        return dict.fromkeys(
            ("sumw", "dmean", "dmean_x", "dmean_y", "m2", "m3", "m4", "cxx", "cyy", "cxy"), 0.0
        )
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


def assert_states_close(
    a: tuple, b: tuple, kind: str, scales: dict[str, float], rtol: float = 1e-10
) -> None:
    ca, cb = canonical(a, kind), canonical(b, kind)
    for key in ca:
        # Derivatives carry factors of up to ~k^2 (moment order, two derivatives).
        atol = rtol * 20 * scales[key]
        np.testing.assert_allclose(ca[key], cb[key], rtol=rtol, atol=atol, err_msg=f"{kind}.{key}")


def _merge(kind: str):
    return operator.add


# Tiny values are mapped to 0: their 4th powers (e.g. 5e-77 -> 1e-305) reach the
# subnormal range, which XLA on CPU flushes to zero (documented in analysis.stats.api).
_value = st.floats(-3, 3, allow_nan=False, allow_infinity=False).map(
    lambda v: 0.0 if abs(v) < 1e-30 else v
)
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
    assert float(empty.value.sumw) == 0.0
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
    assert_states_close(
        merged, sample_states(*whole, offset)[i], kind, natural_scales(*whole, offset)
    )


def _statistics(mom: tuple, com: tuple) -> dict[str, float]:
    m = _core.Moments(*(jnp.asarray(v) for v in mom.value))
    c = _core.CoMoments(*(jnp.asarray(v) for v in com.value))
    fit = _statefns.state_linear_fit(c)
    out = {name: float(fn(m)) for name, fn in _statefns.UNIVARIATE.items()}
    out.update({name: float(_statefns.BIVARIATE[name](c)) for name in ("covar", "corr")})
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
        parts = [
            sample_states(x[s], y[s], weights[s], offset) for s in (slice(0, cut), slice(cut, None))
        ]
        return parts[0][0] + parts[1][0], parts[0][1] + parts[1][1]

    mom, com = merged(w)
    mom_c, com_c = merged([c * wi for wi in w])
    # The states scale with c (sums of weights) or not at all (means), derivatives included.
    scales = natural_scales(x, y, w, offset)
    for kind, a, b in (("moments", mom, mom_c), ("comoments", com, com_c)):
        ca, cb = canonical(a, kind), canonical(b, kind)
        for key in ca:
            factor = 1.0 if key.startswith("dmean") else c
            np.testing.assert_allclose(
                cb[key],
                factor * ca[key],
                rtol=1e-10,
                atol=1e-10 * 20 * factor * scales[key],
                err_msg=key,
            )
    stats, stats_c = _statistics(mom, com), _statistics(mom_c, com_c)
    magnitude = _statistic_magnitudes(np.asarray(x) + offset, np.asarray(y), np.asarray(w))
    for key, value in stats.items():
        want = value
        if key in ("fit_intercept_error", "fit_slope_error"):
            want = value / np.sqrt(
                c
            )  # ak.linear_fit: weights enter linearly, errors ~ 1/sqrt(sum w)
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


# --- 3. merged derivatives against JAX on the merge itself --------------------------------


def _chunk(x, t):
    w = jax.nn.sigmoid(x - t[0]) * jax.nn.sigmoid(t[1] - x * x)
    return _core.moments(x, w), _core.comoments(x, x * x, w)


@jax.jit
def _chunk_taylor(x, t):
    return _chunk(x, t), jax.jacfwd(_chunk, argnums=1)(x, t), jax.hessian(_chunk, argnums=1)(x, t)


@jax.jit
def _merged_by_jax(xa, xb, t):
    """The merge of two chunks' states as a function of the parameters, with its
    Jacobian and Hessian by plain JAX (no Taylor expansion, no Derived)."""

    def f(t):
        (ma, ca), (mb, cb) = _chunk(xa, t), _chunk(xb, t)
        return merge_moments(ma, mb), merge_comoments(ca, cb)

    return f(t), jax.jacfwd(f)(t), jax.jacfwd(jax.jacfwd(f))(t)


@settings(max_examples=20, deadline=None)
@given(st.tuples(st.floats(-2, 2), st.floats(-2, 2)), st.integers(0, 7))
def test_merged_derivatives_match_jax(t, seed) -> None:
    rng = np.random.default_rng(seed)
    xa, xb = rng.normal(size=8), rng.normal(size=8) + 0.5
    t = jnp.asarray(t)
    want, jac, hess = _merged_by_jax(xa, xb, t)
    to_np = partial(jax.tree_util.tree_map, np.asarray)

    def chunk(x):
        value, j, h = _chunk_taylor(x, t)
        return [Derived(("t0", "t1"), to_np(value[i]), to_np(j[i]), to_np(h[i])) for i in (0, 1)]

    a, b = chunk(xa), chunk(xb)
    for i in (0, 1):
        got = a[i] + b[i]
        np.testing.assert_allclose(np.array(got.value), np.array(want[i]), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.array(got.jac), np.array(jac[i]), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.array(got.hess), np.array(hess[i]), rtol=1e-9, atol=1e-9)


def test_merging_empty_states_gives_zeros_with_zero_derivatives() -> None:
    empty = sample_states([], [], [], 0.0)
    merged = empty[0] + empty[0], empty[1] + empty[1]
    for d in merged:
        for tree in d.taylor():
            for leaf in jax.tree_util.tree_leaves(tree):
                assert np.all(leaf == 0.0)
