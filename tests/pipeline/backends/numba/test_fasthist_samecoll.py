"""Expressions over two indexed sets of ONE collection on numba
(analysis.pipeline.backends.numba.kernels._numba_lead with ``lc2 = lc``): ``mass(bjets[0] +
jets[0])`` (hard bins; an indexed observable; a likelihood template in a channel region),
``mass(bjets[0] + jets[0] + jets[1])`` (the hadronic top: depth 0 and depth 1 in one
expression; soft bins) and ``deltaR(bjets[0], jets[0])`` (soft bins) on the NanoAOD v12
file: the states and Jacobians equal the JAX kernel's (1e-12,
analysis.pipeline.backends.jax.histkernel over analysis.select.leading, whose two sets of one
collection are one constrained backward pass per pair); the walk and its vector-Jacobian
product equal exact enumeration and central differences on synthetic events where one
object holds both sets."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_lead
from analysis.select.lanes.arith import LANES
from tests.chunked_helpers import NANOAOD_WARNINGS, slice_columns
from tests.conftest import numba_refusal
from tests.pipeline.backends.numba.test_fasthist_multiset import _equal_states
from tests.pipeline.backends.numba.test_fasthist_multiset import config as multiset_config
from tests.pipeline.backends.numba.test_fasthist_multislot import setup as multislot_setup
from tests.pipeline.backends.numba.test_fastreverse_hists import check, hists_payload

pytestmark = NANOAOD_WARNINGS
HISTS = [
    # its lowest edge above 0: one jet as both sets' member of a massless jet (NanoAOD's
    # packing gives 13 of v12's jets masses <= 0) has mass +-rounding, whose sign eager and
    # compiled JAX round apart (the documented limit at a bin edge)
    {"name": "mbj", "x": "mass(bjets[0] + jets[0])",
     "edges": [10.0, 50.0, 100.0, 200.0, 400.0, 800.0]},
    {"name": "mtop", "x": "mass(bjets[0] + jets[0] + jets[1])",
     "bins": {"n": 4, "lo": 0.0, "hi": 400.0}, "width": 10.0},
    {"name": "drbj", "x": "deltaR(bjets[0], jets[0])", "bins": {"n": 4, "lo": 0.0, "hi": 4.0},
     "width": 0.2},
]


def config(*, width: float = 1.0, likelihood: bool = True) -> dict:
    """:func:`tests.pipeline.backends.numba.test_fasthist_multiset.config`'s sets (jets,
    b-jets from jets, muons, electrons) with the histograms :data:`HISTS`, the b-jet-jet
    mass as an observable and, with ``likelihood``, as a channel's template in a region
    (one b-jet or more)."""
    cfg = multiset_config(width=width, likelihood=likelihood)
    cfg["histograms"] = [dict(h) for h in HISTS]
    cfg["observables"] = [{"name": "m", "x": "mass(bjets[0] + jets[0])", "stats": ["mean"]}]
    if likelihood:
        cfg["likelihood"] = {"channels": {"mbj": {"histogram": "mbj", "selection": [
            {"count": "bjets", "op": ">=", "value": 1}]}}}
    return cfg


def setup(**kw):
    """``(plan, theta, widths, columns)`` of :func:`config` on the v12 file."""
    return multislot_setup(make=config, **kw)


def test_states_and_jacobians_equal_the_jax_kernel() -> None:
    """Every histogram, the template (its shift sides and weight variations) and the
    observable: the numba states and Jacobians equal the JAX kernel's (1e-12)."""
    plan, theta, widths, cols = setup()
    assert numba_refusal(plan, 1, theta) is None
    fast = _equal_states(cols, plan, theta, widths, "v12")
    h = fast.derived.value["histograms"]
    for key in ("mbj", "mtop", "drbj"):
        assert np.abs(h[key].sumw_flow).max() > 0, key
    assert float(np.abs(fast.derived.jac["histograms"]["mtop"].sumw_flow).max()) > 0


@pytest.mark.slow  # JAX kernels of four shapes (the default suite: the states test above)
def test_hard_widths_tiny_chunks_and_threads() -> None:
    """Every width 0, and chunks of 0, 1 and 3 events: the states equal the JAX kernel's;
    1 and 3 threads give the same bits."""
    plan, theta, widths, cols = setup(likelihood=False)
    zero = np.zeros_like(widths)
    _equal_states(cols, plan, theta, zero, "width 0")
    for a, b in ((0, 0), (3, 4), (5, 8)):
        _equal_states(slice_columns(cols, a, b), plan, theta, zero, f"{a}:{b}")
    one, three = (chunk_state(cols, plan, theta, widths, order=1, backend="numba", threads=t)
                  for t in (1, 3))
    for group in ("value", "jac"):
        for key in ("mbj", "mtop", "drbj"):
            a, b = (getattr(s.derived, group)["histograms"][key] for s in (one, three))
            assert np.array_equal(a.sumw_flow, b.sumw_flow), (group, key)
            assert np.array_equal(a.sumw2_flow, b.sumw2_flow), (group, key)


@pytest.mark.slow  # the JAX sweep's compile (the default suite: the walk's VJP below)
def test_pullback_equals_the_jax_sweep() -> None:
    """Every histogram, the template and the observable read: the numba pullback equals
    the JAX sweep (gradient and value states, 1e-10) and central differences."""
    plan, theta, widths, cols = setup()
    payload = hists_payload(cols, plan, theta, widths)
    g = check(cols, plan, theta, widths, payload)
    names = plan.trainable_names
    for n in ("n", "b", "pt_min"):
        assert abs(g[names.index(n)]) > 0, n


# Synthetic: one collection, sets A (bit 0 of the pattern) and B (bit 1), each object's four
# patterns (none, A, B, both); the count state 3 a + b of A's and B's members (capped at 2).
_TGT = np.array([[[min(k // 3 + (p & 1), 2) * 3 + min(k % 3 + (p >> 1), 2) for k in range(9)]
                  for p in range(4)]], np.int64)
# int8 as the pipeline's tables: the walk and its VJP run the pipeline's versions (an int64
# table compiled a version of each of its own)
_PAT = np.array([[[p & 1, p >> 1] for p in range(4)]], np.int8)


def _events(rng, counts):
    """``(coff, base, order_a, order_b, pv)``: each event's objects ranked by a random
    order per set (flat indices), pattern probabilities with every pattern possible."""
    coff = np.zeros((1, len(counts) + 1), np.int64)
    coff[0, 1:] = np.cumsum(counts)
    orders = [np.concatenate([lo + rng.permutation(n) for lo, n in zip(coff[0, :-1], counts)])
              .astype(np.int64) for _ in range(2)]
    pv = rng.uniform(0.05, 1.0, size=(coff[0, -1], 4))
    pv /= pv.sum(axis=1, keepdims=True)
    return coff, np.array([0, coff[0, -1]]), orders[0], orders[1], pv


def _enumerate(coff, orders, depths, pv, f):
    """``{(A's tuple, B's tuple): weight}`` per event by exact enumeration of the
    objects' patterns: each set's leading ``depth + 1`` members (in its order) are the
    tuple, the weight the probability times the pass table ``f`` of the counts."""
    out = []
    for e in range(coff.shape[1] - 1):
        lo, n = coff[0, e], coff[0, e + 1] - coff[0, e]
        got: dict = {}
        for conf in itertools.product(range(4), repeat=n):
            prob = math.prod(pv[lo + j, p] for j, p in enumerate(conf))
            k = 0
            for p in conf:
                k = _TGT[0, p, k]
            lead = []
            for s, (order, d) in enumerate(zip(orders, depths)):
                mem = [o for o in order[lo:lo + n] if conf[o - lo] >> s & 1]
                lead.append(tuple(mem[:d + 1]) if len(mem) > d else None)
            if None not in lead:
                got[tuple(lead)] = got.get(tuple(lead), 0.0) + prob * f[k]
        out.append(got)
    return out


def _walk(coff, base, orders, depths, outer, pv, pd, f, df_l):
    """The kernel's candidates (set ``1 - outer`` the walked one, set ``outer`` the outer
    tuple's): ``(off, w, keys)``, ``keys[q]`` = ``(A's tuple, B's tuple)``."""
    counts = np.diff(coff[0])
    inner = 1 - outer
    per = [np.array([math.comb(int(k), depths[s] + 1) for k in counts]) for s in (inner, outer)]
    off = np.concatenate([[0], np.cumsum(per[0] * per[1])])
    w = np.zeros((int(off[-1]), LANES))
    obj = np.zeros((int(off[-1]), depths[0] + depths[1] + 2), np.int64)
    sets = (coff, base, orders[inner], counts.copy(), 0, inner, depths[inner], orders[outer],
            counts.copy(), 0, outer, depths[outer])
    args = (*sets, pv, pd, _PAT, np.array([4]), _TGT, f, df_l, off, 2, w, obj, None, None, None)
    # compiled as the pipeline compiles it (SLP on): a first call here caches no other build
    _numba_dp.compiled(_numba_lead.candidates, args)(*args, 0, 4)
    d_in = depths[inner] + 1
    split = [(tuple(r[:d_in]), tuple(r[d_in:])) for r in obj]
    keys = [k if inner == 0 else k[::-1] for k in split]
    return sets, off, w, keys


@pytest.mark.parametrize(("depths", "outer"), [((1, 0), 1), ((0, 1), 0), ((1, 1), 1)])
def test_one_collection_walk_equals_enumeration(depths, outer) -> None:
    """Two sets of one collection (each its own rank order; an object may hold both):
    the walk's weights equal exact enumeration of every event's pattern configurations
    (1e-12) for every pair of tuples, the outer set either one; its tangents and its
    vector-Jacobian product (``dL/dpi``, ``dL/df . df``) equal central differences; the
    pattern probabilities it restricts in place come back unchanged."""
    rng = np.random.default_rng(5)
    counts = np.array([0, 1, 3, 2, 4, 5, 3])
    coff, base, oa, ob, pv = _events(rng, counts)
    f = rng.uniform(0.0, 1.0, 9)
    df = rng.normal(size=(9, 2))
    pd = np.zeros(pv.shape + (LANES,))
    d = rng.normal(size=pv.shape)
    pd[:, :, 1] = d
    pv0, pd0 = pv.copy(), pd.copy()
    sets, off, w, keys = _walk(coff, base, (oa, ob), depths, outer, pv, pd, f,
                               np.zeros((9, LANES)))
    # the walk writes each outer tuple's restriction over its rows: restored bit for bit
    assert np.array_equal(pv, pv0) and np.array_equal(pd, pd0)
    ref = _enumerate(coff, (oa, ob), depths, pv, f)
    shared = 0
    for e, got in enumerate(ref):
        mine = {keys[q]: w[q, 0] for q in range(off[e], off[e + 1])}
        assert len(mine) == off[e + 1] - off[e]
        assert set(got) <= set(mine)
        for key, val in mine.items():
            np.testing.assert_allclose(val, got.get(key, 0.0), rtol=1e-12, atol=1e-15)
            shared += bool(set(key[0]) & set(key[1])) and val > 0
    assert shared > 10  # pairs where one object is both sets' member, weight > 0

    def values(pv, f):
        return _walk(coff, base, (oa, ob), depths, outer, pv, 0 * pd, f,
                     np.zeros((9, LANES)))[2][:, 0]

    h = 1e-5
    fd = (values(pv + h * d, f) - values(pv - h * d, f)) / (2 * h)
    np.testing.assert_allclose(w[:, 1], fd, rtol=1e-7, atol=1e-9)
    wbar = rng.normal(size=w.shape[0])
    gp, dfs = np.zeros_like(pv), np.zeros((len(counts), 2))
    _numba_lead.candidates(*sets, pv, 0.0, _PAT, np.array([4]), _TGT, f, df, off, 2, None, None,
                           wbar, gp, dfs, 0, 4)
    assert np.array_equal(pv, pv0)
    np.testing.assert_allclose(np.sum(gp * d), wbar @ fd, rtol=1e-7)
    for r in range(2):
        fd_f = (values(pv, f + h * df[:, r]) - values(pv, f - h * df[:, r])) / (2 * h)
        np.testing.assert_allclose(dfs[:, r].sum(), wbar @ fd_f, rtol=1e-7)
