"""numpy masked arrays are read as awkward reads them: masked entries skipped (issue 54)."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest

from analysis import stats

X = np.ma.masked_array([1.0, 100.0, 3.0, 4.0], mask=[0, 1, 0, 0])
W = np.ma.masked_array([1.0, 2.0, 3.0, 9.0], mask=[0, 0, 0, 1])
Y = np.ma.masked_array([2.0, 1.0, 5.0, 7.0], mask=[1, 0, 0, 0])


def _ak(a):
    return ak.from_numpy(a)


def test_issue_case():
    assert stats.mean(np.ma.masked_array([1, 100, 3], mask=[0, 1, 0])) == pytest.approx(2.0)


@pytest.mark.parametrize("stat", ["mean", "var", "std", "skew", "kurtosis"])
def test_univariate_as_awkward(stat):
    want = getattr(ak, stat, None)
    got = getattr(stats, stat)(X, weight=W)
    ref = getattr(stats, stat)(_ak(X), weight=_ak(W))
    assert float(got) == pytest.approx(float(ref), rel=1e-12)
    if want is not None and stat in ("mean", "var", "std"):
        assert float(got) == pytest.approx(float(want(_ak(X), weight=_ak(W))), rel=1e-12)


def test_bivariate_and_states():
    # as this package reads awkward Arrays with None: the pairs where both are present
    # (awkward's own covar sums x, y and xy each over its own present entries)
    assert float(stats.covar(X, Y)) == pytest.approx(float(stats.covar(_ak(X), _ak(Y))), rel=1e-12)
    assert float(stats.covar(X, Y)) == pytest.approx(np.cov([3.0, 4.0], [5.0, 7.0], bias=True)[0, 1])
    state = stats.moments(X, weight=W)
    assert float(state.sumw) == pytest.approx(1.0 + 3.0)
    assert float(stats.mean(state)) == pytest.approx((1.0 + 9.0) / 4.0)
    assert float(stats.comoments(X, Y).sumw) == pytest.approx(2.0)


def test_nothing_masked_is_plain():
    plain = np.ma.masked_array([1.0, 2.0, 6.0])
    assert float(stats.mean(plain)) == pytest.approx(3.0)


def test_refused_beside_a_jagged():
    x = stats.Jagged(np.array([1.0, 2.0, 3.0]), np.array([0, 2, 3]))
    w = np.ma.masked_array([1.0, 5.0, 1.0], mask=[0, 1, 0])
    with pytest.raises((TypeError, ValueError), match="weight: .*(None|masked)") as err:
        stats.mean(x, weight=w)
    assert "\n" not in str(err.value)
    with pytest.raises(TypeError, match="weight: a numpy masked array with masked entries"):
        from analysis.stats._inputs import _parts

        _parts(w, "weight")
