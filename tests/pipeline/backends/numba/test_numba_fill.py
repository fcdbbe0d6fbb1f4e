"""The fused host-side loops of the numba histograms (analysis.pipeline.backends.numba.kernels._numba_fill).

- :func:`cut_patterns`, :func:`cut_patterns4` and :func:`cut_patterns_pair` against the
  loops they fuse,
  the product rule in numpy then the patterns' product in numpy (:func:`reference_patterns`,
  in set order as the kernels; with the pair layout of the walk,
  :mod:`analysis.pipeline.backends.numba.kernels._numba_hist`, built by numpy slicing), bit for bit: greater /
  less, inclusive, ``abs``, width 0, NaN values, a nested set and an unreachable
  pattern, trainable thresholds, a shift's fixed cuts first; any split into blocks
  gives the same bits.
- :func:`fill` against numpy (``searchsorted`` right, ``add.at``
  in entry order, the product rule written out), 4 and 8 lanes, NaN and infinite
  values, entries of probability 0 at 0, empty events.
"""

from __future__ import annotations

import numpy as np
import pytest

from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_fill

L = _numba_dp.LANES
# (set, field, threshold, width, greater, inclusive, abs, parameter)
CUTS = [(0, 0, 25.0, 5.0, True, False, False, 0), (0, 1, 2.4, 0.1, False, False, True, 2),
        (1, 2, 0.3, 0.05, True, False, False, 1), (1, 1, 0.0, 0.2, False, True, False, 2),
        (2, 0, 30.0, 0.0, True, False, False, -1)]
# 3 sets: 0 ("jets"), 1 from 0 ("bjets"), 2 alone; code -1: unreachable (parent out)
CODES = np.array([[0, -1, 0], [1, 0, 0], [1, 1, 0], [0, -1, 1], [1, 0, 1], [1, 1, 1]],
                 np.int8)


def objects(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cols = np.stack([rng.exponential(35.0, n), rng.normal(0.0, 1.8, n), rng.uniform(0, 1, n)])
    if n:
        cols[0, rng.integers(0, n, 3)] = 25.0  # on the threshold
        cols[1, rng.integers(0, n, 3)] = 0.0
        cols[2, rng.integers(0, n, 2)] = np.nan
    return cols


def probs(cols, cuts):
    """Each cut's probabilities per object (the kernels' ``cols``, row ``m`` for cut ``m``)."""
    return np.stack([_numba_dp.soft_values(cols[f], t, w, gt, inc, ab)
                     for _, f, t, w, gt, inc, ab, _ in cuts]) if cuts else np.empty((0, cols.shape[1]))


def cut_arrays(cuts):
    c = list(zip(*cuts, strict=True))
    return (np.array(c[0], np.int64), np.arange(len(cuts), dtype=np.int64), np.array(c[3]),
            np.array(c[4], np.bool_), np.array(c[7], np.int64))


def reference_probs(cols, cuts, qv=None, qd=None):
    n = cols.shape[1]
    qv = np.ones((3, n)) if qv is None else qv.copy()
    qd = np.zeros((3, n, L)) if qd is None else qd.copy()
    for ls, f, t, w, gt, inc, ab, par in cuts:  # the product rule in numpy
        sv, ds = _numba_dp.soft_array(cols[f], t, w, gt, inc, ab)  # (s, ds/dt)
        q0 = qv[ls].copy()
        qd[ls] *= sv[:, None]
        if par >= 0:
            qd[ls, :, 1 + par] += q0 * ds
        qv[ls] = q0 * sv
    return qv, qd


def reference_patterns(qv, qd):
    """Pattern probabilities ``pv`` ``(N, P)`` and tangents ``pd`` ``(N, P, L)`` from the
    own set probabilities ``qv`` ``(S, N)``, ``qd`` ``(S, N, L)``: ``CODES[p, s]`` 1 in
    the set (``q``), 0 out of it with its parent in (``1 - q``), -1 unreachable (factor
    1); the product rule factor by factor in set order."""
    n = qv.shape[1]
    pv, pd = np.empty((n, len(CODES))), np.empty((n, len(CODES), L))
    for p, codes in enumerate(CODES):
        v, d = np.ones(n), np.zeros((n, L))
        for ls, code in enumerate(codes):
            if code < 0:
                continue
            fac = qv[ls] if code == 1 else 1.0 - qv[ls]
            sign = v if code == 1 else -v
            d = d * fac[:, None] + sign[:, None] * qd[ls]
            v = v * fac
        pv[:, p], pd[:, p] = v, d
    return pv, pd


def no_cuts(n):
    """The fixed cuts of a variant that is no shift: none."""
    return (np.zeros((0, n)), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
            np.zeros(0, np.bool_), np.zeros(0, np.int64))


def test_a_block_range_writes_its_objects_only():
    """Blocks ``b0:b1`` write objects ``b0 block:b1 block`` (sub-blocks of
    :data:`analysis.pipeline.backends.numba.kernels._numba_fill.SUB` do not run over the block's end)."""
    n, block = 1000, 300  # not a multiple of SUB
    cols = objects(n, seed=9)
    pv_all, pd_all = np.full((n, 7, 2), np.nan), np.full((n, 7, L), np.nan)
    args = (probs(cols, CUTS), *cut_arrays(CUTS), *no_cuts(n), CODES, 3, len(CODES), 0, pv_all,
            pd_all, block)
    _numba_dp.compiled(_numba_fill.cut_patterns, args)(*args, 1, 2)
    inside = np.zeros(n, bool)
    inside[block:2 * block] = True
    for a in (pv_all[:, 0, 0], pd_all[:, 0, 0]):
        assert np.isfinite(a[inside]).all() and np.isnan(a[~inside]).all()


def run(kernel, args, n: int, block: int, splits) -> None:
    n_blocks = -(-n // block)
    edges = sorted({0, n_blocks, *[min(s, n_blocks) for s in splits]})
    # compiled as the host compiles it (SLP on): numba's disk cache keeps the first
    # compilation of a kernel, whichever way it was made
    kernel = _numba_dp.compiled(kernel, (*args, block))
    for b0, b1 in zip(edges[:-1], edges[1:], strict=True):  # blocks in any grouping
        kernel(*args, block, b0, b1)


@pytest.mark.parametrize("n, block, splits", [(1, 256, ()), (900, 256, (1, 3)),
                                              (2100, 512, (2,))])
def test_cut_patterns_is_the_product_rule_then_patterns(n, block, splits):
    cols = objects(n, seed=n + 1)
    g0, n_tot = 5, n + 9  # a collection after another one's objects
    pv_all, pd_all = np.full((n_tot, 7, 2), np.nan), np.full((n_tot, 7, L), np.nan)
    args = (probs(cols, CUTS), *cut_arrays(CUTS), *no_cuts(n), CODES, 3, len(CODES), g0,
            pv_all, pd_all)
    run(_numba_fill.cut_patterns, args, n, block, splits)
    pv, pd = reference_patterns(*reference_probs(cols, CUTS))
    got = slice(g0, g0 + n)
    np.testing.assert_array_equal(pv_all[got, :len(CODES), 0], pv)
    np.testing.assert_array_equal(pv_all[got, :len(CODES), 1], pv)
    np.testing.assert_array_equal(pd_all[got, :len(CODES)], pd)
    assert np.isnan(pv_all[:g0]).all() and np.isnan(pd_all[g0 + n:]).all()  # nothing else

    # at most 3 tangents (CUTS' parameters: lanes 1-3): lanes 0-3 over 4 lanes, the
    # same bits, lanes 4-7 zero; alone and with a shift's fixed cuts first
    moved = [c for c in CUTS if c[1] == 0]
    rest = [c for c in CUTS if c[1] != 0]
    for four_args, (qv, qd) in (
            ((probs(cols, CUTS), *cut_arrays(CUTS), *no_cuts(n)), reference_probs(cols, CUTS)),
            ((probs(cols, moved), *cut_arrays(moved), probs(cols, rest), *cut_arrays(rest)),
             reference_probs(cols, moved, *reference_probs(cols, rest)))):
        pv, pd = reference_patterns(qv, qd)
        pv_all[:] = np.nan
        pd_all[:] = np.nan
        run(_numba_fill.cut_patterns4, (*four_args, CODES, 3, len(CODES), g0, pv_all, pd_all),
            n, block, splits)
        np.testing.assert_array_equal(pv_all[got, :len(CODES), 0], pv)
        np.testing.assert_array_equal(pv_all[got, :len(CODES), 1], pv)
        four = pd_all[got, :len(CODES), :4]
        np.testing.assert_array_equal(four, pd[:, :, :4])  # NaN where it is NaN (any sign)
        ok = ~np.isnan(four)
        np.testing.assert_array_equal(four[ok].view(np.int64), pd[:, :, :4][ok].view(np.int64))
        assert np.all(pd_all[got, :len(CODES), 4:] == 0.0)
        assert np.isnan(pv_all[:g0]).all() and np.isnan(pd_all[g0 + n:]).all()

    # two shift sides of field 0: the other cuts first (their probabilities once), the
    # moved ones last, each side's lanes 0-3 side by side (the walk's pair layout)
    moved = [c for c in CUTS if c[1] == 0]
    rest = [c for c in CUTS if c[1] != 0]
    fixed = reference_probs(cols, rest)
    sides = []
    for factor in (1.03, 0.97):
        c = cols.copy()
        c[0] *= factor
        sides.append((c, reference_patterns(*reference_probs(c, moved, *fixed))))
    # page 0 of 1 (a pair's walk), and page 1 of 2 (the second pair of a paged walk: its
    # probabilities in variants 2-3, its lanes 8-15; page 0's entries left alone)
    half = L // 2
    for pages, page in ((1, 0), (2, 1)):
        pv_all, pd_all = (np.full((n_tot, 7, 2 * pages), np.nan),
                          np.full((n_tot, 7, L * pages), np.nan))
        args = (probs(sides[0][0], moved), probs(sides[1][0], moved), *cut_arrays(moved),
                probs(cols, rest), *cut_arrays(rest), CODES, 3, len(CODES), g0, pv_all, pd_all,
                page)
        run(_numba_fill.cut_patterns_pair, args, n, block, splits)
        for v, (_, (pv, pd)) in enumerate(sides):
            np.testing.assert_array_equal(pv_all[got, :len(CODES), 2 * page + v], pv)
            lo = L * page + v * half
            np.testing.assert_array_equal(pd_all[got, :len(CODES), lo:lo + half],
                                          pd[:, :, :half])
        assert np.isnan(pv_all[:, :, :2 * page]).all() and np.isnan(pd_all[:, :, :L * page]).all()


def reference_fill(off, x, p, ev, factors, weight, edges, lanes):
    at = np.repeat(np.arange(len(off) - 1), np.diff(off))
    w = p[:, :1] * ev[at] + ev[at, :1] * p
    w[:, 0] *= 0.5
    x = np.where(w[:, 0] != 0.0, x, 0.0)
    b = np.searchsorted(edges, x, side="right")
    b[np.isnan(x)] = len(edges)
    sumw = np.zeros((len(factors), len(edges) + 1, lanes))
    sumw2 = np.zeros_like(sumw)
    for v, f in enumerate(factors):
        np.add.at(sumw[v], b, f[at, None] * w[:, :lanes])
        np.add.at(sumw2[v], b, (f[at] * f[at] * weight[at])[:, None] * w[:, :lanes])
    return sumw, sumw2


def fill_inputs(lanes: int, seed: int):
    """``(off, x, p, ev, factors, weight, edges)``: 400 events of 0-5 entries, values on
    the edges, at +-inf, NaN and below them, some of probability 0."""
    rng = np.random.default_rng(seed)
    n_ev = 400
    counts = rng.integers(0, 6, n_ev)
    counts[:3] = 0
    off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(off[-1])
    edges = np.array([25.0, 50.0, 75.0, 100.0, 150.0])
    x = rng.choice(np.concatenate([edges, rng.exponential(60.0, 50)]), n)
    x[:4] = [np.nan, np.inf, -np.inf, -3.0]
    p = np.zeros((n, L))
    p[:, :lanes] = rng.uniform(-1.0, 1.0, (n, lanes))
    p[:, 0] = np.abs(p[:, 0])
    p[rng.integers(0, n, 20), 0] = 0.0  # probability 0: at x = 0 (here the underflow)
    p[5, 0] = 0.0
    x[5] = np.nan
    ev = np.zeros((n_ev, L))
    ev[:, :lanes] = rng.uniform(-1.0, 1.0, (n_ev, lanes))
    factors = rng.uniform(0.5, 1.5, (3, n_ev))
    weight = rng.uniform(0.5, 2.0, n_ev)
    return off, x, p, ev, factors, weight, edges


@pytest.mark.parametrize("lanes", [4, 8])
def test_fill_is_numpy(lanes):
    off, x, p, ev, factors, weight, edges = fill_inputs(lanes, lanes)
    sumw = np.zeros((3, len(edges) + 1, lanes))
    sumw2 = np.zeros_like(sumw)
    args = (off, x, p, ev, factors, weight, edges, 0.0, np.zeros(len(edges), np.int64), sumw,
            sumw2)
    _numba_dp.vectorised(_numba_fill.fill, args)(*args)  # as fasthist._run_fills
    ref = reference_fill(off, x, p, ev, factors, weight, edges, lanes)
    np.testing.assert_array_equal(sumw, ref[0])
    np.testing.assert_array_equal(sumw2, ref[1])
    assert (sumw[:, :, 0] != 0).all()  # every bin, underflow and overflow, filled


def test_a_pair_with_more_than_3_tangents_is_refused():
    """The pair kernel keeps 4 lanes per side (numba checks no bounds): the host side
    refuses a pair with 4 trainable parameters (the walk never asks for one)."""
    from types import SimpleNamespace

    from analysis.pipeline.backends.numba._fastpatterns import patterns_into

    tab = SimpleNamespace(collections=("Jet",), n_coll_sets=np.array([1]),
                          coll_sets=np.array([[0]]), set_cuts=[[]], pat=np.zeros((1, 2, 1)),
                          n_pat=np.array([2]))
    coff = np.array([[0, 1]])
    kept = {None: {0: (np.zeros((0, 1)), *no_cuts(1)[1:])}}
    with pytest.raises(ValueError, match="at most 3 tangents, not 4"):
        patterns_into(tab, coff, np.array([0, 1]), [{"Jet": {}}, {"Jet": {}}], None, None,
                      (0, 1, 2, 3), 1, "Jet:pt", kept, None, None)
