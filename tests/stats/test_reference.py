"""Values of analysis.stats against awkward (numpy backend, float64), scipy and numpy.

Random jagged data come from hypothesis with values and weights on a dyadic grid
(k/8 and k/4): every product and sum awkward forms is then exact in float64, so
awkward's raw-sum formulas (``ak.linear_fit``, ``ak.moment``) are exact references and
1e-12 relative is a fair tolerance; generic floats are covered separately with an
absolute floor scaled to the data. Undefined results (zero total weight, empty or
constant lists) must be NaN exactly where awkward's are not finite.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import awkward as ak
import hypothesis.strategies as st
import numpy as np
import pytest
import scipy.stats
import uproot
from hypothesis import HealthCheck, given, settings

from analysis import stats

RTOL = 1e-12
# awkward's own reductions (~5-30 ms a call) dominate the runtime: few, rich examples
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FILES = [
    "nanoAOD_2015_CMS_Open_Data_ttbar.root",
    "nano_dy.root",
    "nano_tt_v12.root",
    "nano_tree.root",
    "nano_dy_empty.root",
]


# --- helpers ---------------------------------------------------------------------


def _as_float(result: object) -> np.ndarray:
    """awkward result (scalar, None, or array with None) -> float64 numpy, None -> NaN."""
    if result is None:
        return np.array(np.nan)
    if isinstance(result, ak.Array):
        return ak.to_numpy(ak.fill_none(result, np.nan)).astype(np.float64)
    return np.asarray(result, dtype=np.float64)


def assert_matches(ours: object, ref: object, scale: object = 1.0, rtol: float = RTOL) -> None:
    """``ours`` equals ``ref`` to ``rtol`` relative, with an absolute floor ``rtol * scale``
    (``scale``: the size of the terms that were summed, per list or overall); NaN in
    ``ours`` exactly where ``ref`` is not finite."""
    a = _as_float(ours)
    b = _as_float(ref)
    assert a.shape == b.shape, (a.shape, b.shape)
    undefined = ~np.isfinite(b)
    np.testing.assert_array_equal(np.isnan(a), undefined, err_msg="NaN positions differ")
    atol = rtol * np.broadcast_to(np.asarray(scale, dtype=np.float64), a.shape)
    ok = ~undefined
    err = np.abs(a[ok] - b[ok])
    bound = rtol * np.abs(b[ok]) + atol[ok]
    assert np.all(err <= bound), f"max excess {np.max(err - bound)}; ours {a[ok]}, ref {b[ok]}"


def _list_max_abs(x: ak.Array, axis: int | None) -> np.ndarray:
    """max |x| per list (axis=1) or overall, 0 for empty lists: the scale of the data."""
    m = ak.max(abs(x), axis=axis)
    return _as_float(m) if axis is not None else np.asarray(0.0 if m is None else m)


def _sumw(x: ak.Array, weight: ak.Array | None, axis: int | None) -> np.ndarray:
    w = x * 0 + (1.0 if weight is None else weight)
    return _as_float(ak.sum(w, axis=axis))


def ak_var(x: ak.Array, weight: ak.Array | None, ddof: int, axis: int | None) -> np.ndarray:
    """``ak.var``, NaN where ``W <= ddof`` for ``ddof > 0`` (our documented convention:
    there awkward returns negative variances or rounding noise)."""
    ref = _as_float(ak.var(x, weight=weight, ddof=ddof, axis=axis))
    return ref if ddof == 0 else np.where(_sumw(x, weight, axis) > ddof, ref, np.nan)


def _constant(x: ak.Array, weight: ak.Array | None, axis: int | None) -> np.ndarray:
    """True where the elements of non-zero weight all have one value (or there are none)."""
    if weight is not None:
        x = x[(x * 0 + weight) != 0]
    lo, hi = ak.min(x, axis=axis), ak.max(x, axis=axis)
    if axis is None:
        return np.asarray(lo is None or lo == hi)
    return ak.to_numpy(ak.fill_none(lo == hi, True))


def undefined_if(ref: object, mask: np.ndarray) -> np.ndarray:
    """A reference with NaN where ``mask`` (degenerate data where awkward gives noise)."""
    return np.where(mask, np.nan, _as_float(ref))


# XLA on CPU flushes subnormal numbers to zero, awkward (numpy) does not: keep clear
finite = st.floats(-1e3, 1e3, allow_subnormal=False).filter(lambda v: v == 0 or abs(v) > 1e-100)
dyadic = st.integers(-160, 160).map(lambda k: k / 8)
grid_weight = st.integers(0, 12).map(lambda k: k / 4)


@st.composite
def jagged_data(draw: st.DrawFn) -> dict[str, ak.Array]:
    """x, y, per-element and per-list weights with empty lists, single elements,
    zero weights and whole lists of zero weight."""
    counts = draw(st.lists(st.integers(0, 6), min_size=0, max_size=8))
    n = sum(counts)
    x = draw(st.lists(dyadic, min_size=n, max_size=n))
    y = draw(st.lists(dyadic, min_size=n, max_size=n))
    w = draw(st.lists(grid_weight, min_size=n, max_size=n))
    dead = draw(
        st.lists(st.sampled_from([False, False, True]), min_size=len(counts), max_size=len(counts))
    )
    w = np.array(w, dtype=np.float64)
    w[np.repeat(np.array(dead, dtype=bool), counts)] = 0.0
    wl = draw(st.lists(grid_weight, min_size=len(counts), max_size=len(counts)))
    c = np.array(counts, dtype=np.int64)
    return {
        "x": ak.unflatten(np.array(x, dtype=np.float64), c),
        "y": ak.unflatten(np.array(y, dtype=np.float64), c),
        "w": ak.unflatten(w, c),
        "wl": ak.Array(np.array(wl, dtype=np.float64)),
    }


def _weights(d: dict[str, ak.Array]) -> list[ak.Array | None]:
    # one weight per list broadcasts per list (by structure, as awkward), also when
    # the number of lists equals the number of elements
    return [None, d["w"], d["wl"]]


# --- hypothesis: awkward parity ----------------------------------------------------


@SETTINGS
@given(jagged_data())
def test_univariate_match_awkward(d: dict[str, ak.Array]) -> None:
    x = d["x"]
    for weight in _weights(d):
        for axis in (None, 1):
            s = _list_max_abs(x, axis)
            assert_matches(
                stats.mean(x, weight=weight, axis=axis), ak.mean(x, weight=weight, axis=axis), s
            )
            for ddof in (0, 1):
                ref = ak_var(x, weight, ddof, axis)
                assert_matches(stats.var(x, weight=weight, ddof=ddof, axis=axis), ref, s * s)
                assert_matches(stats.std(x, weight=weight, ddof=ddof, axis=axis), np.sqrt(ref), s)
                # and ak.std itself, where it is defined
                assert_matches(
                    stats.std(x, weight=weight, ddof=ddof, axis=axis),
                    undefined_if(ak.std(x, weight=weight, ddof=ddof, axis=axis), np.isnan(ref)),
                    s,
                )
            for n in (0, 1, 3):
                assert_matches(
                    stats.moment(x, n, weight=weight, axis=axis),
                    ak.moment(x, n, weight=weight, axis=axis),
                    s**n,
                )


@SETTINGS
@given(jagged_data())
def test_bivariate_match_awkward(d: dict[str, ak.Array]) -> None:
    x, y = d["x"], d["y"]
    for weight in _weights(d):
        for axis in (None, 1):
            sx, sy = _list_max_abs(x, axis), _list_max_abs(y, axis)
            assert_matches(
                stats.covar(x, y, weight=weight, axis=axis),
                ak.covar(x, y, weight=weight, axis=axis),
                sx * sy,
            )
            assert_matches(
                stats.corr(x, y, weight=weight, axis=axis),
                ak.corr(x, y, weight=weight, axis=axis),
                1.0,
            )
            ours = stats.linear_fit(x, y, weight=weight, axis=axis)
            ref = ak.linear_fit(x, y, weight=weight, axis=axis)
            for field in ("intercept", "slope", "intercept_error", "slope_error"):
                # awkward gives inf for some fields of a degenerate fit, we give NaN
                assert_matches(ours[field], ref[field], 1.0, rtol=1e-11)


@settings(SETTINGS, max_examples=12)
@given(
    st.lists(st.lists(finite, max_size=7), max_size=8),
    st.integers(0, 2**31),
)
def test_generic_floats_match_awkward(lists: list[list[float]], seed: int) -> None:
    counts = np.array([len(v) for v in lists], dtype=np.int64)
    x = ak.unflatten(np.array([v for lst in lists for v in lst], dtype=np.float64), counts)
    w = ak.unflatten(np.random.default_rng(seed).uniform(0, 2, int(ak.count(x))), ak.num(x))
    for weight in (None, w):
        for axis in (None, 1):
            s = _list_max_abs(x, axis)
            assert_matches(
                stats.mean(x, weight=weight, axis=axis), ak.mean(x, weight=weight, axis=axis), s
            )
            # awkward's single rounded mean costs up to ~eps * max|x| per deviation
            assert_matches(
                stats.var(x, weight=weight, axis=axis), ak_var(x, weight, 0, axis), 8 * s * s
            )
            assert_matches(
                stats.covar(x, x, weight=weight, axis=axis),
                ak.covar(x, x, weight=weight, axis=axis),
                8 * s * s,
            )


# --- real files ----------------------------------------------------------------------


def _read(path: Path) -> ak.Array:
    return uproot.open(path)["Events"].arrays(["Jet_pt", "Jet_eta", "genWeight"])


@pytest.mark.parametrize(
    ("name", "weights"),
    [
        (FILES[0], "none soft gen"),
        (FILES[1], "soft"),
        (FILES[2], "gen"),
        (FILES[3], "none"),
        (FILES[4], "none soft"),
    ],
)
def test_real_files_match_awkward(shared_data: Path, name: str, weights: str) -> None:
    ev = _read(shared_data / name)
    pt = ak.values_astype(ev.Jet_pt, np.float64)
    eta = ak.values_astype(ev.Jet_eta, np.float64)
    # a per-jet soft weight, and the per-event generator weight (broadcast per list)
    choices = {
        "none": None,
        "soft": 1.0 / (1.0 + np.exp(-(pt - 30.0) / 5.0)),
        "gen": ak.values_astype(abs(ev.genWeight), np.float64),
    }
    for weight in (choices[k] for k in weights.split()):
        for axis in (None, 1):
            s = _list_max_abs(pt, axis)
            e = _list_max_abs(eta, axis)
            assert_matches(
                stats.mean(pt, weight=weight, axis=axis), ak.mean(pt, weight=weight, axis=axis), s
            )
            for ddof in (0, 1):
                assert_matches(
                    stats.var(pt, weight=weight, ddof=ddof, axis=axis),
                    ak_var(pt, weight, ddof, axis),
                    s * s,
                )
                assert_matches(
                    stats.std(eta, weight=weight, ddof=ddof, axis=axis),
                    np.sqrt(ak_var(eta, weight, ddof, axis)),
                    e,
                )
            for n in (1, 2, 3):
                assert_matches(
                    stats.moment(eta, n, weight=weight, axis=axis),
                    ak.moment(eta, n, weight=weight, axis=axis),
                    e**n,
                )
            assert_matches(
                stats.covar(pt, eta, weight=weight, axis=axis),
                ak.covar(pt, eta, weight=weight, axis=axis),
                s * e,
            )
            # one-jet events: awkward's corr/fit of a single point is rounding noise
            flat_x = _constant(pt, weight, axis)
            flat = flat_x | _constant(eta, weight, axis)
            assert_matches(
                stats.corr(pt, eta, weight=weight, axis=axis),
                undefined_if(ak.corr(pt, eta, weight=weight, axis=axis), flat),
                1.0,
            )
            ours = stats.linear_fit(pt, eta, weight=weight, axis=axis)
            ref = ak.linear_fit(pt, eta, weight=weight, axis=axis)
            # awkward's raw sums cancel (delta = W sum w x^2 - (sum w x)^2): its own
            # error on pT ~ 30 +- 25 GeV is ~1e-14, so 1e-10 is a safe bound here.
            for field in ("intercept", "slope", "intercept_error", "slope_error"):
                assert_matches(ours[field], undefined_if(ref[field], flat_x), 0.0, rtol=1e-10)


def test_float32_inputs_are_upcast(shared_data: Path) -> None:
    ev = _read(shared_data / FILES[0])
    assert ev.Jet_pt.layout.content.dtype == np.float32
    ours = stats.var(ev.Jet_pt, weight=ev.genWeight, axis=1)
    assert ak.to_numpy(ours).dtype == np.float64  # an awkward Array of float64
    # the same as on float64 inputs: products are formed after the upcast
    ref = ak.var(
        ak.values_astype(ev.Jet_pt, np.float64),
        weight=ak.values_astype(ev.genWeight, np.float64),
        axis=1,
    )
    assert_matches(ours, ref, _list_max_abs(ev.Jet_pt, 1) ** 2)


# --- skew and kurtosis -------------------------------------------------------------


def _two_pass(x: np.ndarray, w: np.ndarray | None = None) -> tuple[float, float]:
    """numpy float64 weighted two-pass skew and excess kurtosis (biased)."""
    w = np.ones_like(x) if w is None else w
    mu = np.sum(w * x) / np.sum(w)
    d = x - mu
    m2, m3, m4 = (np.sum(w * d**k) / np.sum(w) for k in (2, 3, 4))
    return m3 / m2**1.5, m4 / m2**2 - 3.0


@SETTINGS
@given(st.lists(st.lists(finite, max_size=9), min_size=1, max_size=6))
def test_skew_kurtosis_match_scipy(lists: list[list[float]]) -> None:
    counts = np.array([len(v) for v in lists], dtype=np.int64)
    flat = np.array([v for lst in lists for v in lst], dtype=np.float64)
    x = ak.unflatten(flat, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy warns on constant data
        for func, ref in ((stats.skew, scipy.stats.skew), (stats.kurtosis, scipy.stats.kurtosis)):
            expected = ref(flat, bias=True) if len(flat) else np.nan
            assert_matches(func(x), expected, 1e-3, rtol=1e-9)
            per_list = [ref(np.asarray(v), bias=True) if len(v) else np.nan for v in lists]
            assert_matches(func(x, axis=1), np.array(per_list, dtype=np.float64), 1e-3, rtol=1e-9)


def test_weighted_skew_kurtosis_match_numpy_two_pass() -> None:
    rng = np.random.default_rng(7)
    counts = rng.integers(2, 40, 50)
    x = rng.gamma(2.0, 10.0, counts.sum())
    w = rng.uniform(0.1, 2.0, counts.sum())
    xj, wj = ak.unflatten(x, counts), ak.unflatten(w, counts)
    sk, ku = _two_pass(x, w)
    np.testing.assert_allclose(stats.skew(xj, weight=wj), sk, rtol=1e-12)
    np.testing.assert_allclose(stats.kurtosis(xj, weight=wj), ku, rtol=1e-12)
    off = np.concatenate([[0], np.cumsum(counts)])
    ref = np.array([_two_pass(x[a:b], w[a:b]) for a, b in zip(off[:-1], off[1:], strict=True)])
    np.testing.assert_allclose(stats.skew(xj, weight=wj, axis=1), ref[:, 0], rtol=1e-10)
    np.testing.assert_allclose(stats.kurtosis(xj, weight=wj, axis=1), ref[:, 1], rtol=1e-10)
    # central moments are the same sums
    mu = np.sum(w * x) / np.sum(w)
    for n in range(5):
        np.testing.assert_allclose(
            stats.central_moment(xj, n, weight=wj),
            np.sum(w * (x - mu) ** n) / np.sum(w),
            rtol=1e-11,
            atol=1e-11 * np.max(np.abs(x - mu)) ** n,
        )


def test_constant_data_skew_is_nan_and_std_zero() -> None:
    x = ak.Array([[3.3, 3.3, 3.3], [0.1], [], [2.0, 5.0]])
    w = ak.Array([[0.7, 0.3, 1.9], [0.37], [], [1.0, 1.0]])
    np.testing.assert_array_equal(stats.std(x, weight=w, axis=1), [0.0, 0.0, np.nan, 1.5])
    assert np.all(np.isnan(np.asarray(stats.skew(x, weight=w, axis=1))[:3]))
    assert np.all(np.isnan(np.asarray(stats.kurtosis(x, weight=w, axis=1))[:3]))


# --- precision -----------------------------------------------------------------------


def test_stability_large_offset() -> None:
    """x = 1e6 + N(0, 1): catastrophic for raw power sums, fine for corrected two-pass."""
    rng = np.random.default_rng(2024)
    x = 1e6 + rng.standard_normal(100_000)
    # numpy float64 *corrected* two-pass: d = x - mean; r = d.mean(); M_k = mean((d - r)^k)
    d = x - x.mean()
    r = d.mean()
    m2, m3, m4 = (np.mean((d - r) ** k) for k in (2, 3, 4))
    # Plain two-pass numpy (no r) is itself ~1e-8 to ~4e-8 off on M3 for this input
    # (2.2e-8 with this seed): the rounded mean is off by up to about an ulp of 1e6
    # (1.2e-10), which shifts M3 by 3 * err * M2 while M3 itself is only ~0.01.
    # Shown against np.longdouble (x86 80-bit extended precision), a reference too:
    xl = x.astype(np.longdouble)
    dl = xl - xl.mean()
    m2l, m3l, m4l = (np.mean(dl**k) for k in (2, 3, 4))
    plain_m3 = np.mean(d**3)
    assert abs(plain_m3 / m3l - 1) > 1e-9  # plain two-pass misses our bar...
    assert abs(m3 / m3l - 1) < 1e-9  # ...the corrected one does not

    var, sk, ku = stats.var(x), stats.skew(x), stats.kurtosis(x)
    np.testing.assert_allclose(var, m2, rtol=1e-9)
    np.testing.assert_allclose(sk, m3 / m2**1.5, rtol=1e-9)
    np.testing.assert_allclose(ku, m4 / m2**2 - 3.0, rtol=1e-9)
    np.testing.assert_allclose(var, float(m2l), rtol=1e-9)
    np.testing.assert_allclose(sk, float(m3l / m2l**1.5), rtol=1e-9)
    np.testing.assert_allclose(ku, float(m4l / m2l**2 - 3), rtol=1e-9)
    # also through the jagged per-list path
    xj = ak.unflatten(x, [50_000, 50_000])
    np.testing.assert_allclose(stats.skew(xj, axis=1)[0], scipy.stats.skew(x[:50_000]), rtol=1e-6)
