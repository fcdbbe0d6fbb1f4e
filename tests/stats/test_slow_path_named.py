"""A chunk function that closes over an object of a class of yours (``self.nmin``) cannot
be an argument of a compiled program: stats.derive traces it on every chunk. It says so once per
function and process, naming what it closes over and the fix; a function that closes
over local copies says nothing (and is compiled once per bucket).

Reference: the values of the two functions agree (the warning changes no result).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from analysis import stats
from analysis.soft import soft_cut


class Proc:
    def __init__(self, nmin):
        self.nmin = nmin

    def slow(self, pt):
        def fn(theta):
            w = soft_cut(pt, ">", theta["cut"] + self.nmin, 1.0)
            return {"pt": stats.moments(pt, weight=w)}
        return fn

    def fast(self, pt):
        nmin = self.nmin

        def fn(theta):
            w = soft_cut(pt, ">", theta["cut"] + nmin, 1.0)
            return {"pt": stats.moments(pt, weight=w)}
        return fn


def chunks():
    rng = np.random.default_rng(3)
    for n in (300, 310, 290):
        counts = rng.integers(0, 4, n)
        yield stats.Jagged(rng.uniform(10, 90, counts.sum()), np.concatenate([[0], np.cumsum(counts)]))


def derive_all(make):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = [stats.derive(make(pt), {"cut": 30.0}) for pt in chunks()]
    return out, [w for w in caught if "stats.derive" in str(w.message)]


def test_a_function_closing_over_self_is_named_once():
    proc = Proc(2.0)
    slow, named = derive_all(proc.slow)
    assert len(named) == 1, [str(w.message) for w in named]
    line = str(named[0].message)
    assert "\n" not in line and "'self' (a Proc object)" in line and "nmin = self.nmin" in line
    fast, quiet = derive_all(proc.fast)
    assert quiet == []
    for a, b in zip(slow, fast):
        assert float(stats.mean(a.value["pt"])) == pytest.approx(float(stats.mean(b.value["pt"])), rel=1e-12)
