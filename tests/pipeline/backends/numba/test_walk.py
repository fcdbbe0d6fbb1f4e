"""The count-state walk's steps (analysis.select.lanes.steps) against exact
enumeration of every pattern assignment of an event's objects.

For random transition tables ``tgt[p, k]`` (pattern 0 keeps the state), pattern
probabilities ``pi[j, p]`` with tangents and a pass table ``f``: the pass probability
``P = sum_a prod_j pi[j, a_j] f(state(a))``, its tangents (the product rule over the
factors), the weight of object ``j`` in pattern ``p``, ``P(a_j = p and pass)``, and the
event sums' powers ``E[X^m 1_pass]``, from the steps against the sum over all ``P^N``
assignments. Each step is one source compiled into its variants by the arrays it is
given (kernels/lanes.py): every variant is checked here, tangents in 8 lanes (``h =
0``), two variants of 4 lanes (``h = 4``), values only (and lane 0 of the tangent
variant to the last bit), the forward step on masked states (the leading objects'
walk). The one-set chain's steps: tests/select/test_chainwalk.py.
"""

from __future__ import annotations

import itertools

import numba
import numpy as np
import pytest

from analysis.select.lanes import steps
from analysis.select.lanes.arith import LANES, lin_add2


@numba.njit
def _walk_lanes(pv, pd, tgt, f, df, h, pv_hi):
    """P (lanes) and the weights H[j, p] (lanes) of one event, every state, from the
    steps; ``pv_hi`` the second variant's probabilities (h = 4) or ``pv`` (h = 0)."""
    n, n_pat = pv.shape
    n_states = f.shape[0]
    states = np.arange(n_states)
    F = np.zeros((n + 1, n_states, LANES))
    F[0, 0, 0] = 1.0
    F[0, 0, h] = 1.0
    for j in range(n):
        steps.clear(F[j + 1], states, n_states)
        for p in range(n_pat):
            steps.forward(F[j + 1], F[j], pv[j, p], pv_hi[j, p], pd[j, p], tgt[p], states,
                         n_states, h, states, False)
    G = np.empty((n_states, LANES))
    Gn = np.empty((n_states, LANES))
    for k in range(n_states):
        G[k] = df[k]
        G[k, 0] = f[k]
        G[k, h] = f[k]
    H = np.zeros((n, n_pat, LANES))
    inner = np.empty(LANES)
    for j in range(n - 1, -1, -1):
        for p in range(n_pat):
            steps.weight(inner, F[j], G, tgt[p], states, n_states, h, states, False)
            H[j, p] = 0.0
            lin_add2(H[j, p], pv[j, p], pv_hi[j, p], inner, inner[0], inner[h], pd[j, p])
        steps.clear(Gn, states, n_states)
        for p in range(n_pat):
            steps.backward(Gn, G, pv[j, p], pv_hi[j, p], pd[j, p], tgt[p], states, n_states, h)
        G[:] = Gn
    return G[0].copy(), H


@numba.njit
def _walk_values(pv, tgt, f):
    n, n_pat = pv.shape
    n_states = f.shape[0]
    states = np.arange(n_states)
    F = np.zeros((n + 1, n_states))
    F[0, 0] = 1.0
    for j in range(n):
        steps.clear(F[j + 1], states, n_states)
        for p in range(n_pat):
            steps.forward(F[j + 1], F[j], pv[j, p], pv[j, p], 0.0, tgt[p], states, n_states, 0,
                         states, False)
    G = f.copy()
    Gn = np.empty(n_states)
    H = np.zeros((n, n_pat))
    for j in range(n - 1, -1, -1):
        for p in range(n_pat):
            H[j, p] = pv[j, p] * steps.weight(H, F[j], G, tgt[p], states, n_states, 0, states,
                                             False)
        steps.clear(Gn, states, n_states)
        for p in range(n_pat):
            steps.backward(Gn, G, pv[j, p], pv[j, p], 0.0, tgt[p], states, n_states, 0)
        G[:] = Gn
    return G[0], H


def _enumerate(pv, pd, tgt, f, df):
    """(P, dP (lanes 1..), weights P(a_j = p and pass)) by summing over every assignment."""
    n, n_pat = pv.shape
    P, dP, W = 0.0, np.zeros(LANES), np.zeros((n, n_pat))
    for a in itertools.product(range(n_pat), repeat=n):
        k = 0
        for p in a:
            k = tgt[p, k]
        prob = np.prod([pv[j, p] for j, p in enumerate(a)])
        P += prob * f[k]
        dP += prob * df[k]
        for j, p in enumerate(a):
            rest = np.prod([pv[i, q] for i, q in enumerate(a) if i != j])
            dP += pd[j, p] * rest * f[k]
            W[j, p] += prob * f[k]
    dP[0] = 0.0
    return P, dP, W


def _event(seed: int, n: int = 4, n_pat: int = 3, n_states: int = 5):
    rng = np.random.default_rng(seed)
    tgt = rng.integers(0, n_states, (n_pat, n_states))
    tgt[0] = np.arange(n_states)  # pattern 0: in no set, the state kept
    pv = rng.dirichlet(np.ones(n_pat), n)
    pd = rng.normal(size=(n, n_pat, LANES))
    pd[:, :, 0] = 0.0
    f = rng.uniform(0, 1, n_states)
    df = rng.normal(size=(n_states, LANES))
    df[:, 0] = 0.0
    return pv, pd, tgt, f, df


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_steps_equal_enumeration(seed):
    pv, pd, tgt, f, df = _event(seed)
    P, dP, W = _enumerate(pv, pd, tgt, f, df)
    lanes, H = _walk_lanes(pv, pd, tgt, f, df, 0, pv)
    assert lanes[0] == pytest.approx(P, rel=1e-13)
    np.testing.assert_allclose(lanes[1:], dP[1:], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(H[:, :, 0], W, rtol=1e-12, atol=1e-15)
    value, Hv = _walk_values(pv, tgt, f)
    assert value == pytest.approx(P, rel=1e-13)
    np.testing.assert_allclose(Hv, W, rtol=1e-12, atol=1e-15)
    # the value steps are lane 0 of the lane steps, to the last bit
    assert value == lanes[0] and np.array_equal(Hv, H[:, :, 0])


def test_two_variants_are_two_walks():
    # lanes 0-3 one variant, 4-7 another (other probabilities, the same tables): each
    # half is that variant's own walk with 3 tangents
    pv, pd, tgt, f, df = _event(3)
    pv2, pd2, _, _, _ = _event(4)
    both = pd.copy()
    both[:, :, 4:] = pd2[:, :, :4]
    both[:, :, 4] = 0.0
    df2 = df.copy()
    df2[:, 4:] = df[:, :4]
    lanes, _ = _walk_lanes(pv, both, tgt, f, df2, 4, pv2)
    for half, (p_, d_) in enumerate(((pv, pd), (pv2, pd2))):
        d = d_.copy()
        d[:, :, 4:] = 0.0
        P, dP, _ = _enumerate(p_, d, tgt, f, np.where(np.arange(LANES) < 4, df, 0.0))
        assert lanes[4 * half] == pytest.approx(P, rel=1e-13)
        np.testing.assert_allclose(lanes[4 * half + 1: 4 * half + 4], dP[1:4], rtol=1e-12,
                                   atol=1e-14)


@numba.njit
def _sums(pv, pd, x, tgt, f, binom):
    """E[X^m 1_pass] (lanes, and values only) of X = sum_j x[j, a_j] by the event sums'
    backward step."""
    n, n_pat = pv.shape
    n_states = f.shape[0]
    big = binom.shape[0]
    states = np.arange(n_states)
    Gm = np.zeros((big, n_states, LANES))
    Gv = np.zeros((big, n_states))
    for k in range(n_states):
        Gm[0, k, 0] = f[k]
        Gv[0, k] = f[k]
    acc = np.empty(LANES)
    for j in range(n - 1, -1, -1):
        Gn = np.zeros_like(Gm)
        Gvn = np.zeros_like(Gv)
        for p in range(n_pat):
            steps.sums_backward(Gn, Gm, pv[j, p], pd[j, p], x[j, p], binom, tgt[p], states,
                               n_states, acc)
            steps.sums_backward(Gvn, Gv, pv[j, p], 0.0, x[j, p], binom, tgt[p], states,
                               n_states, 0.0)
        Gm, Gv = Gn, Gvn
    return Gm[:, 0].copy(), Gv[:, 0].copy()


def test_event_sum_steps_equal_enumeration():
    pv, pd, tgt, f, _ = _event(5)
    x = np.random.default_rng(6).normal(2.0, 1.0, pv.shape)
    x[:, 0] = 0.0  # pattern 0 holds no set: adds nothing to the sum
    binom = np.array([[1.0, 0, 0], [1, 1, 0], [1, 2, 1]])
    lanes, values = _sums(pv, pd, x, tgt, f, binom)
    ref = np.zeros(3)
    dref = np.zeros((3, LANES))
    for a in itertools.product(range(pv.shape[1]), repeat=pv.shape[0]):
        k = 0
        for p in a:
            k = tgt[p, k]
        X = sum(x[j, p] for j, p in enumerate(a))
        prob = np.prod([pv[j, p] for j, p in enumerate(a)])
        for m in range(3):
            ref[m] += prob * f[k] * X**m
            for j, p in enumerate(a):
                rest = np.prod([pv[i, q] for i, q in enumerate(a) if i != j])
                dref[m] += pd[j, p] * rest * f[k] * X**m
    np.testing.assert_allclose(lanes[:, 0], ref, rtol=1e-12)
    np.testing.assert_allclose(lanes[:, 1:], dref[:, 1:], rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(values, ref, rtol=1e-12)
    assert np.array_equal(values, lanes[:, 0])  # the value variant is lane 0, to the bit


@numba.njit
def _masked_forward(pv, pd, tgt, mask):
    """F_n by the forward step on the states of ``mask`` only (the leading objects'
    variant), in lanes and for values only."""
    n, n_pat = pv.shape
    n_states = tgt.shape[1]
    states = np.arange(n_states)
    F = np.zeros((n + 1, n_states, LANES))
    Fv = np.zeros((n + 1, n_states))
    F[0, 0, 0] = 1.0
    Fv[0, 0] = 1.0
    for j in range(n):
        for p in range(n_pat):
            steps.forward(F[j + 1], F[j], pv[j, p], pv[j, p], pd[j, p], tgt[p], states,
                         n_states, 0, mask, True)
            steps.forward(Fv[j + 1], Fv[j], pv[j, p], pv[j, p], 0.0, tgt[p], states,
                         n_states, 0, mask, True)
    return F[n].copy(), Fv[n].copy()


@pytest.mark.parametrize("seed", [7, 8])
def test_masked_forward_steps_equal_enumeration(seed):
    # F_n[k] = sum over the assignments whose path leaves only states of the mask
    pv, pd, tgt, _, _ = _event(seed)
    mask = np.ones(tgt.shape[1], np.bool_)
    mask[[2, 4]] = False
    ref = np.zeros(tgt.shape[1])
    dref = np.zeros((tgt.shape[1], LANES))
    for a in itertools.product(range(pv.shape[1]), repeat=pv.shape[0]):
        k, ok = 0, True
        for p in a:
            ok = ok and bool(mask[k])
            k = tgt[p, k]
        if ok:
            ref[k] += np.prod([pv[j, p] for j, p in enumerate(a)])
            for j, p in enumerate(a):
                dref[k] += pd[j, p] * np.prod([pv[i, q] for i, q in enumerate(a) if i != j])
    lanes, values = _masked_forward(pv, pd, tgt, mask)
    np.testing.assert_allclose(lanes[:, 0], ref, rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(lanes[:, 1:], dref[:, 1:], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(values, ref, rtol=1e-13, atol=1e-16)
    assert np.array_equal(values, lanes[:, 0])
