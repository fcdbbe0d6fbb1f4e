"""analysis.stats as a drop-in for awkward's statistics (issue 12).

Property tests against real awkward (numpy backend, float64) on random nested lists
with missing values (None elements and None lists), empty lists, per-element,
per-list and scalar weights, every axis and keyword; values are on a dyadic grid
(k/8, weights k/4) so that awkward's sums are exact and 1e-12 relative is fair.
Undefined results (empty groups, constant data) must be NaN exactly where awkward's
are not finite, None exactly where awkward's are None, and types must be awkward's.
"""

from __future__ import annotations

import math
from typing import Any

import awkward as ak
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from analysis import stats

RTOL = 1e-12
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# the size of the terms each statistic sums (values up to 20): absolute floor RTOL * SCALE
SCALE = {"mean": 20, "var": 400, "std": 20, "covar": 400, "corr": 1, "moment": 8000}


# --- comparison ---------------------------------------------------------------------


def _plain(result: Any) -> Any:
    if isinstance(result, (ak.Array, ak.Record)):
        return result.to_list()
    if isinstance(result, (np.ndarray, jax.Array)):
        return np.asarray(result).tolist()
    return None if result is None else float(result)


def _close(a: Any, b: Any, scale: float, where: str = "") -> None:
    """Same nesting and None positions; NaN in ``a`` exactly where ``b`` is not finite."""
    if isinstance(b, dict):
        assert isinstance(a, dict) and a.keys() == b.keys(), where
        for k in b:
            _close(a[k], b[k], scale, f"{where}.{k}")
        return
    if isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), (where, a, b)
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            _close(u, v, scale, f"{where}[{i}]")
        return
    if b is None:
        assert a is None, (where, a)
        return
    assert a is not None, (where, b)
    if not math.isfinite(b):
        assert math.isnan(a), (where, a, b)
        return
    assert abs(a - b) <= RTOL * (abs(b) + scale), (where, a, b)


def assert_like_awkward(ours: Any, ref: Any, scale: float = 1.0) -> None:
    """Same kind of result (awkward Array / Record / scalar / None), type and numbers."""
    if isinstance(ref, (ak.Array, ak.Record)):
        assert type(ours) is type(ref), (type(ours), type(ref))
        assert str(ours.type) == str(ref.type), (str(ours.type), str(ref.type))
    else:
        assert not isinstance(ours, (ak.Array, ak.Record)), type(ours)
        assert (ours is None) == (ref is None), (ours, ref)
    _close(_plain(ours), _plain(ref), scale)


def _ak(func: Any, *args: Any, **kw: Any) -> Any:
    """awkward's result; None where awkward fails on an empty ``axis=None`` reduction with
    ``mask_identity=True`` (``None / None``: a TypeError in awkward, None in ours)."""
    try:
        return func(*args, **kw)
    except TypeError as err:
        if "NoneType" not in str(err):
            raise
        assert kw.get("mask_identity")
        return None


# --- random nested lists with missing values ----------------------------------------

value = st.integers(-160, 160).map(lambda k: k / 8)
weight = st.integers(0, 12).map(lambda k: k / 4)


def _nested(draw: st.DrawFn, depth: int, leaf: st.SearchStrategy, none_rate: int) -> list:
    """A list of ``depth`` levels; None elements and None lists with 1/none_rate odds."""

    def maybe_none() -> bool:
        return none_rate > 0 and draw(st.integers(0, none_rate - 1)) == 0

    def level(d: int) -> Any:
        if d == 0:
            return None if maybe_none() else draw(leaf)
        if d < depth and maybe_none():
            return None
        return [level(d - 1) for _ in range(draw(st.integers(0, 4)))]

    return [level(depth - 1) for _ in range(draw(st.integers(0, 5)))]


def _like(draw: st.DrawFn, template: Any, leaf: st.SearchStrategy, none_rate: int) -> Any:
    """Same nesting as ``template`` (None lists kept), new leaves, own None elements."""
    if isinstance(template, list):
        return [_like(draw, t, leaf, none_rate) for t in template]
    if template is None:
        return None
    return None if none_rate and draw(st.integers(0, none_rate - 1)) == 0 else draw(leaf)


@st.composite
def cases(draw: st.DrawFn, bivariate: bool = False) -> dict[str, Any]:
    depth = draw(st.sampled_from([1, 2, 2, 3]))
    raw = _nested(draw, depth, value, draw(st.sampled_from([0, 4, 8])))
    x = ak.Array(raw) if raw else ak.Array(np.zeros(0))
    # (awkward refuses scalar weights; ours accepts them, tested elsewhere)
    kind = draw(st.sampled_from(["none", "element", "list"]))
    if kind == "none":
        w = None
    elif kind == "element":
        w = ak.Array(_like(draw, raw, weight, 6)) if raw else None
    else:  # one weight per outer entry, as events.genWeight
        w = np.array([draw(weight) for _ in range(len(raw))])
    # y: None where x is None (where only one of them is, awkward masks each variable
    # on its own, we mask the pair: README)
    y = ak.Array(_like(draw, raw, value, 0)) if bivariate and raw else x
    depth = x.ndim
    axis = draw(st.sampled_from([None, *range(-depth, depth)]))
    return {
        "x": x,
        "y": y,
        "weight": w,
        "axis": axis,
        "keepdims": draw(st.booleans()),
        "mask_identity": draw(st.booleans()),
    }


def _kw(case: dict[str, Any]) -> dict[str, Any]:
    return {k: case[k] for k in ("weight", "axis", "keepdims", "mask_identity")}


# --- properties -----------------------------------------------------------------------


@SETTINGS
@given(cases())
def test_univariate_like_awkward(case: dict[str, Any]) -> None:
    x, kw = case["x"], _kw(case)
    for name in ("mean", "var", "std"):
        assert_like_awkward(
            getattr(stats, name)(x, **kw), _ak(getattr(ak, name), x, **kw), SCALE[name]
        )
    for n in (0, 1, 2, 3):
        assert_like_awkward(stats.moment(x, n, **kw), _ak(ak.moment, x, n, **kw), SCALE["moment"])


@SETTINGS
@given(cases(bivariate=True))
def test_bivariate_like_awkward(case: dict[str, Any]) -> None:
    x, y, kw = case["x"], case["y"], _kw(case)
    assert_like_awkward(stats.covar(x, y, **kw), _ak(ak.covar, x, y, **kw), SCALE["covar"])
    assert_like_awkward(stats.corr(x, y, **kw), _ak(ak.corr, x, y, **kw), SCALE["corr"])
    assert_like_awkward(stats.linear_fit(x, y, **kw), _ak(ak.linear_fit, x, y, **kw), 8000)


@SETTINGS
@given(cases())
def test_our_extensions_follow_the_same_structure(case: dict[str, Any]) -> None:
    """skew, kurtosis, central_moment: awkward's result structure (that of ak.var) and,
    for central_moment(2), ak.var's numbers."""
    x, kw = case["x"], _kw(case)
    ref = _ak(ak.var, x, **kw)
    assert_like_awkward(stats.central_moment(x, 2, **kw), ref, SCALE["var"])
    for func in (stats.skew, stats.kurtosis):
        ours = func(x, **kw)
        assert type(ours) is type(ref) or (ref is None) == (ours is None)
        if isinstance(ref, ak.Array):
            assert str(ours.type) == str(ref.type)


# --- the examples of the issue ---------------------------------------------------------


def test_per_list_weights_broadcast_by_structure() -> None:
    x = ak.Array([[1.0, 2.0], [], [3.0]])
    weight = np.array([1.0, 2.0, 3.0])  # one per event, as events.genWeight
    assert stats.mean(x, weight=weight, axis=1).to_list()[::2] == [1.5, 3.0]
    assert math.isnan(stats.mean(x, weight=weight, axis=1)[1])
    assert stats.mean(x, weight=weight) == pytest.approx(2.4, rel=1e-15)
    assert stats.mean(x, weight=jnp.asarray(weight)) == pytest.approx(2.4, rel=1e-15)
    assert stats.mean(x, weight=ak.Array(weight)) == pytest.approx(2.4, rel=1e-15)
    # same weight as a state: moments broadcast the same way
    assert stats.mean(stats.moments(x, weight=weight)) == pytest.approx(2.4, rel=1e-15)
    # a Jagged takes flat weights per element only; per list is explicit
    j = stats.from_awkward(x)
    assert stats.mean(j, weight=j.expand(weight)) == pytest.approx(2.4, rel=1e-15)
    with pytest.raises(ValueError, match="x.expand"):
        stats.mean(stats.from_awkward(ak.Array([[1.0], [2.0, 3.0]])), weight=np.ones(2))


def test_infinities_and_nan_propagate() -> None:
    assert stats.mean(np.array([1.0, np.inf])) == np.inf
    assert stats.mean(ak.Array([1.0, np.inf])) == np.inf
    assert stats.mean(ak.Array([[-np.inf]]), axis=1).to_list() == [-np.inf]
    assert math.isnan(stats.mean(np.array([np.inf, -np.inf])))
    assert math.isnan(stats.var(np.array([1.0, np.inf])))  # as numpy and awkward
    assert math.isnan(stats.mean(np.array([1.0, np.nan])))
    assert stats.moment(np.array([1.0, np.inf]), 2) == np.inf
    for ours, ref in [
        (stats.var(ak.Array([[1.0, np.inf], [2.0]]), axis=1), [np.nan, 0.0]),
        (stats.std(ak.Array([[np.nan, 1.0], [2.0, 4.0]]), axis=1), [np.nan, 1.0]),
    ]:
        np.testing.assert_array_equal(ak.to_numpy(ours), ref)
    grad = jax.grad(lambda v: stats.mean(v, weight=jnp.array([1.0, 0.0])))(jnp.array([1.0, 3.0]))
    assert np.all(np.isfinite(grad))


def test_option_types_from_physics_idioms() -> None:
    jets = ak.Array([[50.0, 30.0, 20.0], [], [40.0], [60.0, 25.0]])
    for x in (
        ak.firsts(jets),
        ak.mask(jets, jets > 25),
        ak.pad_none(jets, 2),
        ak.pad_none(jets, 2, clip=True),
    ):
        for axis in (None, 0, -1):
            for mi in (False, True):
                kw = {"axis": axis, "mask_identity": mi}
                assert_like_awkward(stats.mean(x, **kw), ak.mean(x, **kw), 60)
                assert_like_awkward(stats.std(x, **kw), ak.std(x, **kw), 60)


def test_keepdims_idiom_and_positions() -> None:
    pt = ak.Array([[50.0, 30.0, 20.0], [], [40.0], [60.0, 25.0]])
    centred = pt - stats.mean(pt, axis=1, keepdims=True)
    assert ak.all(abs(ak.sum(centred, axis=1)) < 1e-12)
    assert_like_awkward(centred, pt - ak.mean(pt, axis=1, keepdims=True), 60)
    # axis=0: leading jet, second jet, third jet
    assert stats.mean(pt, axis=0).to_list() == [50.0, 27.5, 20.0]
    assert stats.mean(pt, axis=-2).to_list() == [50.0, 27.5, 20.0]


def test_other_structures() -> None:
    nested = [[[1.0, 2.0], []], [[3.0]], []]
    grid = np.arange(12.0).reshape(3, 4)
    for x, axes in [
        (ak.Array(nested), (None, 0, 1, 2, -1, -2, -3)),
        (ak.to_regular(ak.Array([[1.0, 2.0], [3.0, 5.0]]), axis=1), (None, 0, 1)),
        (ak.Array(grid), (None, 0, 1)),
    ]:
        for axis in axes:
            assert_like_awkward(stats.var(x, axis=axis), ak.var(x, axis=axis), 100)
    # Python lists act as awkward does: awkward results
    assert_like_awkward(stats.mean(nested, axis=-1), ak.mean(nested, axis=-1), 10)
    # numpy and JAX arrays keep giving JAX arrays, shaped as numpy's results
    for arr in (grid, jnp.asarray(grid)):
        for axis in (None, 0, 1, -1):
            for keepdims in (False, True):
                ours = stats.var(arr, axis=axis, keepdims=keepdims)
                assert isinstance(ours, jax.Array)
                np.testing.assert_allclose(ours, np.var(grid, axis=axis, keepdims=keepdims))


def test_result_types_and_keywords() -> None:
    x = ak.Array([[1.0, 2.0, 4.0], [], [3.0, 5.0]])
    behavior = {"custom": 1}
    out = stats.mean(x, axis=1, behavior=behavior, attrs={"run": 7})
    assert out.behavior == behavior and out.attrs == {"run": 7}
    assert isinstance(stats.mean(x, axis=1, highlevel=False), ak.contents.Content)
    assert stats.mean(x[1:2], mask_identity=True) is None
    assert isinstance(stats.mean(x), np.float64)
    fit = stats.linear_fit(x, 2 * x + 1)
    assert isinstance(fit, ak.Record) and fit.layout.array.parameter("__record__") == "LinearFit"
    assert (fit.slope, fit.intercept) == (pytest.approx(2.0), pytest.approx(1.0))
    fits = stats.linear_fit(x, 2 * x + 1, axis=1)
    assert fits.fields == ["intercept", "slope", "intercept_error", "slope_error"]
    assert_like_awkward(fits, ak.linear_fit(x, 2 * x + 1, axis=1), 10)
    # numpy/JAX inputs: the jit-friendly NamedTuple
    flat = np.array([1.0, 2.0, 4.0])
    assert isinstance(stats.linear_fit(flat, 2 * flat), stats.LinearFit)
    with pytest.raises(TypeError, match="keepdims: expected True or False"):
        stats.mean(x, keepdims=1)


# --- gradients of the new paths against finite differences -----------------------------


# awkward's JAX backend refuses unless JAX's default backend is the CPU (awkward/jax.py):
# on a GPU machine the tests that need it have no reference to run.
needs_awkward_jax = pytest.mark.skipif(
    jax.default_backend() != "cpu",
    reason="awkward's JAX backend needs JAX's default backend to be the CPU")


def _jax_backend(x: ak.Array) -> ak.Array:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ak.jax.register_and_check()
        return ak.to_backend(x, "jax")


def _direction(x: ak.Array, seed: int) -> ak.Array:
    """Random numbers with the structure of ``x`` (None where x is None)."""
    rng = np.random.default_rng(seed)

    def leaf(layout: Any, **_: Any) -> Any:
        if layout.is_numpy:
            return ak.contents.NumpyArray(rng.normal(size=layout.length))
        return None

    return ak.transform(leaf, x)


GRAD_CASES = {
    "mean options axis=1": lambda x: stats.mean(x, axis=1),
    "var options axis=0": lambda x: stats.var(x, axis=0),
    "std keepdims": lambda x: stats.std(x, axis=-1, keepdims=True),
    "skew axis=0": lambda x: stats.skew(x, axis=0),
    "covar axis=0": lambda x: stats.covar(x, x * x, axis=0),
    "corr axis=None": lambda x: stats.corr(x, x * x),
    "mean per-list weights": lambda x: stats.mean(x, weight=np.array([1.0, 2.0, 0.5, 3.0, 1.0])),
}


@needs_awkward_jax
@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_gradients_match_finite_differences(name: str) -> None:
    f = GRAD_CASES[name]
    x = ak.Array([[1.5, None, 4.0, 2.0], None, [], [3.0, 5.5, 0.25], [2.5, -1.0, None, 7.0]])

    def total(a: ak.Array) -> Any:
        out = f(a)
        if isinstance(out, ak.Array):
            out = ak.to_jax(ak.fill_none(ak.flatten(out, axis=None), 0.0))
        return jnp.nansum(jnp.asarray(out))

    grad = jax.grad(total)(_jax_backend(x))
    grad = ak.to_backend(grad, "cpu")
    h = 1e-5
    for seed in range(3):
        d = _direction(x, seed)
        fd = (float(total(x + h * d)) - float(total(x - h * d))) / (2 * h)
        directional = float(ak.sum(grad * d, axis=None))
        assert directional == pytest.approx(fd, rel=1e-6, abs=1e-8), name


@needs_awkward_jax
def test_weight_gradient_through_awkward_structure() -> None:
    """A JAX weight (a soft cut's output) with awkward data: JAX-backed awkward results."""
    x = ak.Array([[1.0, 2.0, None], [], [3.0, 6.0], None])
    w = jnp.array([1.0, 2.0, 3.0, 4.0])

    def f(w: jax.Array) -> jax.Array:
        return jnp.nansum(ak.to_jax(ak.fill_none(stats.mean(x, weight=w, axis=0), 0.0)))

    g = jax.grad(f)(w)
    e = np.eye(4) * 1e-6
    fd = [(f(w + e[i]) - f(w - e[i])) / 2e-6 for i in range(4)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    assert np.all(np.isfinite(g))


def test_jit_paths_keep_working() -> None:
    """Jagged (one level of lists) and JAX arrays of any shape under jit and grad."""
    pt = stats.from_awkward(ak.Array([[50.0, 30.0, 20.0], [], [40.0], [60.0, 25.0]]))

    @jax.jit
    def per_event(c: jax.Array) -> jax.Array:
        w = jax.nn.sigmoid((pt.values - c) / 5.0)
        return stats.mean(pt, weight=w, axis=1, keepdims=True)

    out = per_event(jnp.float64(30.0))
    assert out.shape == (4, 1) and math.isnan(out[1, 0])
    assert stats.mean(pt, keepdims=True).shape == (1, 1)
    assert stats.mean(pt.values, keepdims=True).shape == (1,)
    grid = jnp.arange(12.0).reshape(3, 4) ** 1.5

    def f(a: jax.Array) -> jax.Array:
        return jnp.sum(stats.std(a, axis=0))

    assert jax.jit(f)(grid) == pytest.approx(float(np.sum(np.std(np.asarray(grid), axis=0))))
    g = jax.jit(jax.grad(f))(grid)
    e = np.zeros((3, 4))
    e[1, 2] = 1e-6
    assert g[1, 2] == pytest.approx(float((f(grid + e) - f(grid - e)) / 2e-6), rel=1e-6)


def test_documented_differences() -> None:
    """The README's table: where we differ from awkward, on purpose."""
    # None in only one variable: the pair is dropped (awkward: covar([0], [None]) = 0)
    assert math.isnan(stats.covar(ak.Array([0.0]), ak.Array([None, 1.0])[:1]))
    x, y = ak.Array([[1.0, 2.0, 4.0]]), ak.Array([[3.0, None, 1.0]])
    both = ak.Array([[1.0, 4.0]]), ak.Array([[3.0, 1.0]])
    assert stats.covar(x, y, axis=1).to_list() == ak.covar(*both, axis=1).to_list()
    # an empty axis=None reduction with mask_identity=True is None (awkward: TypeError)
    assert stats.moment(ak.Array(np.zeros(0)), 2, mask_identity=True) is None
    # undefined fits: every field NaN (awkward: inf in some)
    fit = stats.linear_fit(ak.Array([2.0]), ak.Array([3.0]))
    assert all(math.isnan(fit[f]) for f in fit.fields)
    # ddof beyond the total weight: NaN (awkward: inf or a negative variance)
    assert math.isnan(stats.var(ak.Array([2.0]), ddof=1))
    # a scalar weight is accepted
    assert stats.mean(ak.Array([[1.0], [3.0]]), weight=2.5) == 2.0


def test_named_axes() -> None:
    x = ak.with_named_axis(ak.Array([[1.0, 2.0], [3.0], [4.0, 5.0, 6.0]]), ("events", "jets"))
    for axis in ("events", "jets"):
        for keepdims in (False, True):
            ours = stats.var(x, axis=axis, keepdims=keepdims)
            ref = ak.var(x, axis=axis, keepdims=keepdims)
            assert_like_awkward(ours, ref, 40)
            assert ours.named_axis == ref.named_axis
    with pytest.raises(ValueError, match="'muons' is not a named axis"):
        stats.mean(x, axis="muons")


@needs_awkward_jax
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(bivariate=True))
def test_jax_backend_gives_the_numpy_backend_results(case: dict[str, Any]) -> None:
    """Results on awkward's JAX backend: JAX-backed, same structure, type and numbers."""
    x, y, kw = case["x"], case["y"], _kw(case)
    if isinstance(kw["weight"], ak.Array):
        kw["weight"] = _jax_backend(kw["weight"])
    xj, yj = _jax_backend(x), _jax_backend(y)
    np_kw = {**kw, "weight": case["weight"]}
    for ours, ref in [
        (stats.std(xj, **kw), stats.std(x, **np_kw)),
        (stats.corr(xj, yj, **kw), stats.corr(x, y, **np_kw)),
    ]:
        if isinstance(ref, ak.Array):
            assert ak.backend(ours) == "jax"
            ours = ak.to_backend(ours, "cpu")
        assert_like_awkward(
            ours if ours is None or isinstance(ours, ak.Array) else float(ours), ref
        )


def test_regular_dimensions_every_keyword() -> None:
    rng = np.random.default_rng(5)
    cube = np.round(rng.normal(size=(3, 4, 2)) * 8) / 8
    for x in (ak.Array(cube), ak.to_regular(ak.Array(cube.tolist()), axis=None)):
        for axis in (None, 0, 1, 2, -1, -2):
            for keepdims in (False, True):
                for mi in (False, True):
                    kw = {"axis": axis, "keepdims": keepdims, "mask_identity": mi}
                    assert_like_awkward(stats.mean(x, **kw), ak.mean(x, **kw), 10)
                    assert_like_awkward(stats.covar(x, x, **kw), ak.covar(x, x, **kw), 100)


def test_typetracer_gives_awkward_types() -> None:
    """dask-awkward builds graphs on typetracers: types, no numbers."""
    x = ak.Array([[1.0, 2.0], [], [3.0]], backend="typetracer")
    for ours, ref in [
        (stats.mean(x, axis=1), ak.mean(x, axis=1)),
        (stats.skew(x, axis=0, keepdims=True), ak.var(x, axis=0, keepdims=True)),
        (stats.linear_fit(x, x, axis=1), ak.linear_fit(x, x, axis=1)),
    ]:
        assert ak.backend(ours) == "typetracer" and str(ours.type) == str(ref.type)
