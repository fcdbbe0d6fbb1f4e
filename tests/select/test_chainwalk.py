"""The one-set walk written once (analysis.select.chainwalk) against exact enumeration of
every pass/fail assignment of an event's objects: its steps on the chain of count states,
one event's walk in lanes and for values (lane 0 to the last bit), own processors'
tangent kernel in blocks of lanes (any number of tangents), and the cache keying of the
kernels that inline it."""

from __future__ import annotations

import itertools
from pathlib import Path

import numba
import numpy as np
import pytest

from analysis._compat.numba import CheckedCacheFile
from analysis.select import chainwalk as cw
from analysis.select import singlekernels as sk
from analysis.select.lanes import policy, steps
from analysis.select.lanes.arith import QUAD
from analysis.select.lanes.steps import chain_backward, chain_forward

LANES = cw.LANES


def _enumerate(q, dq, f, df):
    """(P, dP lanes, w_j, dw_j lanes) by summing over every assignment (product rule)."""
    n, top = q.size, f.size - 1
    P, dP = 0.0, np.zeros(LANES)
    w, dw = np.zeros(n), np.zeros((n, LANES))
    for a in itertools.product((0, 1), repeat=n):
        k = min(sum(a), top)
        fac = [q[j] if x else 1.0 - q[j] for j, x in enumerate(a)]
        dfac = [dq[j] if x else -dq[j] for j, x in enumerate(a)]
        prob = np.prod(fac)
        d = prob * df[k] + sum(dfac[j] * np.prod(fac[:j] + fac[j + 1:]) * f[k] for j in range(n))
        P += prob * f[k]
        dP += d
        for j, x in enumerate(a):
            if x:
                w[j] += prob * f[k]
                dw[j] += d
    dP[0] = 0.0
    dw[:, 0] = 0.0
    return P, dP, w, dw


def _case(n, top, seed):
    rng = np.random.default_rng(seed)
    q = rng.uniform(0.05, 0.95, n)
    dq = rng.normal(size=(n, LANES))
    dq[:, 0] = 0.0
    f = rng.uniform(0, 1, top + 1)
    df = rng.normal(size=(top + 1, LANES))
    df[:, 0] = 0.0
    return q, dq, f, df


@numba.njit
def _steps(q, dq, f, df, full):
    """P in lanes and values by the backward steps; F_n by the forward steps (``full``:
    every state each step)."""
    n, top = q.shape[0], f.shape[0] - 1
    G = np.empty((n + 1, top + 1, LANES))
    for i in range(top + 1):
        G[n, i] = df[i]
        G[n, i, 0] = f[i]
    g, gn = f.copy(), np.empty(top + 1)
    F = np.zeros((n + 1, top + 1, LANES))
    F[0, 0, 0] = 1.0
    Fv = np.zeros((n + 1, top + 1))
    Fv[0, 0] = 1.0
    for s in range(n):
        chain_forward(F[s], F[s + 1], s, top, q[s], dq[s], full)
        chain_forward(Fv[s], Fv[s + 1], s, top, q[s], 0.0, full)
    for j in range(n - 1, -1, -1):
        chain_backward(G[j + 1], G[j], j, top, q[j], dq[j], full)
        chain_backward(g, gn, j, top, q[j], 0.0, full)
        g, gn = gn, g
    return G[0, 0].copy(), g[0], F[n, :, 0].copy(), Fv[n].copy()


@pytest.mark.parametrize("n, top", [(5, 3), (2, 3), (4, 0)])
def test_chain_steps_equal_enumeration(n, top):
    q, dq, f, df = _case(n, top, n + top)
    P, dP, _, _ = _enumerate(q, dq, f, df)
    lanes, value, Fn, Fv = _steps(q, dq, f, df, False)
    assert lanes[0] == pytest.approx(P, rel=1e-13) and value == pytest.approx(P, rel=1e-13)
    np.testing.assert_allclose(lanes[1:], dP[1:], rtol=1e-12, atol=1e-14)
    dist = np.zeros(top + 1)  # the final count distribution
    for a in itertools.product((0, 1), repeat=n):
        dist[min(sum(a), top)] += np.prod([q[j] if x else 1.0 - q[j] for j, x in enumerate(a)])
    np.testing.assert_allclose(Fn, dist, rtol=1e-13, atol=1e-15)
    assert value == lanes[0] and np.array_equal(Fv, Fn)  # values: lane 0, to the bit
    # every state stepped (own processors' kernels): the same floats, to the bit
    full = _steps(q, dq, f, df, True)
    assert np.array_equal(full[0], lanes) and full[1] == value
    assert np.array_equal(full[2], Fn) and np.array_equal(full[3], Fv)


@numba.njit
def _general_and_chain(F, G, q, d, nd, top, j):
    """One forward and one backward step from ``F``, ``G`` (rows of lanes, or numbers) by the
    chain's steps and by the general steps (two patterns: out, ``row[k] = k`` with
    tangents ``nd = -d``, then in, the chain's target ``top``, into cleared rows)."""
    n = F.shape[0]
    states = np.arange(n)
    same = np.arange(n)
    Fc, Fg, Gc, Gg = np.zeros_like(F), np.zeros_like(F), np.zeros_like(G), np.zeros_like(G)
    chain_forward(F, Fc, j, top, q, d, True)
    chain_backward(G, Gc, j, top, q, d, True)
    steps.clear(Fg, states, n)
    steps.forward(Fg, F, 1.0 - q, 1.0 - q, nd, same, states, n, 0, states, False)
    steps.forward(Fg, F, q, q, d, top, 0, n, 0, 0, False)  # the chain's target, every state
    steps.clear(Gg, states, n)
    steps.backward(Gg, G, 1.0 - q, 1.0 - q, nd, same, states, n, 0)
    steps.backward(Gg, G, q, q, d, top, 0, n, 0)
    wc = steps.weight(0.0, F[:, 0] if F.ndim == 2 else F, G[:, 0] if G.ndim == 2 else G, top,
                      0, n, 0, 0, False)
    row = np.minimum(np.arange(n) + 1, top)
    wg = steps.weight(0.0, F[:, 0] if F.ndim == 2 else F, G[:, 0] if G.ndim == 2 else G, row,
                      states, n, 0, states, False)
    return Fc, Fg, Gc, Gg, wc, wg


@pytest.mark.parametrize("form", ["lanes", "four", "values"])
def test_chain_steps_are_the_general_steps_with_the_chain_target(form):
    """The one-set chain's steps (both patterns of a state summed before one store) and
    the weights' inner sum with the chain's target (a number, chosen at compile time) give
    the general steps' floats on an explicit target row, to the bit: 8 lanes, 4 lanes
    (tangents a tuple of 4) and values."""
    rng = np.random.default_rng(3)
    top = 3
    width = {"lanes": LANES, "four": 4, "values": 0}[form]
    shape = (top + 1, width) if width else (top + 1,)
    F, G = rng.uniform(0, 1, shape), rng.uniform(0, 1, shape)
    q = 0.37
    d = rng.normal(size=width)
    if width:
        d[0] = 0.0  # the value lane carries no tangent
    if form == "lanes":
        args = (d, -d)
    elif form == "four":
        args = (tuple(d), tuple(-d))
    else:
        args = (0.0, 0.0)
    Fc, Fg, Gc, Gg, wc, wg = _general_and_chain(F, G, q, *args, top, 2)
    assert np.array_equal(Fc, Fg) and np.array_equal(Gc, Gg) and wc == wg
    # and they are the recursions: F'[k] = (1 - q) F[k] + q F[k - 1] (top absorbing), lane 0
    F0 = F[:, 0] if width else F
    want = (1 - q) * F0 + q * np.concatenate([[0.0], F0[:-1]])
    want[top] += q * F0[top]
    np.testing.assert_allclose(Fc[:, 0] if width else Fc, want, rtol=1e-15)


@numba.njit
def _walk(q, ds, f, df, want_w, lanes, full):
    """One event's walk (``ds``: the tangents, lanes first), in lanes or for values;
    ``full``: every state each step."""
    n, top = q.shape[0], f.shape[0] - 1
    off = np.array([0, n])
    pe = np.zeros((1, LANES))
    ow = np.zeros((n, LANES))
    if lanes:
        cw.walk_events((q, ds, 0), off, 0, 1, f, df, want_w, max(n, 1), pe, ow, top, full)
    else:
        cw.walk_events((q,), off, 0, 1, f, 0.0, want_w, max(n, 1), pe, ow, top, full)
    return pe[0], ow


@pytest.mark.parametrize("n, top", [(5, 2), (3, 3), (4, 0), (0, 2)])
@pytest.mark.parametrize("want_w", [True, False])
def test_event_walk_equals_enumeration(n, top, want_w):
    q, dq, f, df = _case(n, top, 7 * n + top)
    P, dP, w, dw = _enumerate(q, dq, f, df)
    ds = np.ascontiguousarray(dq[:, 1:].T)
    pe, ow = _walk(q, ds, f, df, want_w, True, False)
    np.testing.assert_allclose(pe, dP + np.eye(LANES)[0] * P, rtol=1e-12, atol=1e-14)
    pv, ov = _walk(q, ds, f, df, want_w, False, False)
    assert pv[0] == pe[0] and not pv[1:].any()  # values: lane 0 to the bit
    if want_w:
        np.testing.assert_allclose(ow[:, 0], w, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(ow[:, 1:], dw[:, 1:], rtol=1e-11, atol=1e-14)
        assert np.array_equal(ov[:, 0], ow[:, 0]) and not ov[:, 1:].any()
    for lanes, (p0, o0) in ((True, (pe, ow)), (False, (pv, ov))):  # every state stepped
        p1, o1 = _walk(q, ds, f, df, want_w, lanes, True)
        assert np.array_equal(p1, p0) and (not want_w or np.array_equal(o1, o0))


def _tangent(q, f, off, dq, df, dw, dP, w, P, full=True):
    """Own processors' tangent kernel as its handler calls it (four lanes for at most
    ``QUAD - 1`` tangents), the number of states given (``full``) or not."""
    lanes = (np.zeros((f.size, QUAD)),) if dq.shape[0] <= QUAD - 1 else np.zeros(
        (f.size, LANES))
    sk._tangent(q, f, off, dq, df, dw, dP, w, P, f.size - 1, full, lanes)


def _primal(q, f, off, w, P, full=True):
    sk._primal(q, f, off, w, P, f.size - 1, full)


@pytest.mark.parametrize("n_lanes", [1, 3, 4, 7, 10])
def test_own_tangent_kernel_any_number_of_lanes(n_lanes):
    """Own processors' tangent kernel in blocks of LANES - 1 tangents (QUAD - 1 where it
    has at most that many: four lanes): each lane equals the kernel run for that lane
    alone (four lanes; bit for bit) and the derivative of the values by
    central differences; the values it returns are the primal kernel's; every state
    stepped (the handlers' constant state counts) or the reachable ones (any count): the
    same bits."""
    rng = np.random.default_rng(n_lanes)
    counts = np.array([3, 0, 5, 1, 2])
    off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    q = rng.uniform(0.05, 0.95, off[-1] + 2)  # two padding slots: weight 0
    f = np.array([0.0, 0.3, 1.0])
    dq = rng.normal(size=(n_lanes, q.size))
    df = rng.normal(size=(n_lanes, f.size))
    dw, dP = np.empty((n_lanes, q.size)), np.empty((n_lanes, counts.size))
    w, P = np.empty(q.size), np.empty(counts.size)
    _tangent(q, f, off, dq, df, dw, dP, w, P)
    w0, P0 = np.empty(q.size), np.empty(counts.size)
    _primal(q, f, off, w0, P0)
    assert np.array_equal(w, w0) and np.array_equal(P, P0)
    assert not w[off[-1]:].any() and not dw[:, off[-1]:].any()
    reach = [np.empty_like(x) for x in (dw, dP, w, P, w0, P0)]
    _tangent(q, f, off, dq, df, *reach[:4], full=False)
    _primal(q, f, off, *reach[4:], full=False)
    for a, b in zip(reach, (dw, dP, w, P, w0, P0)):
        assert np.array_equal(a, b)
    for b in range(n_lanes):
        dw1, dP1 = np.empty((1, q.size)), np.empty((1, counts.size))
        _tangent(q, f, off, dq[b:b + 1], df[b:b + 1], dw1, dP1, w[:0], P[:0])
        assert np.array_equal(dw1[0], dw[b]) and np.array_equal(dP1[0], dP[b])
        h = 1e-6
        wp, Pp, wm, Pm = (np.empty(q.size), np.empty(counts.size),
                          np.empty(q.size), np.empty(counts.size))
        _primal(q + h * dq[b], f + h * df[b], off, wp, Pp)
        _primal(q - h * dq[b], f - h * df[b], off, wm, Pm)
        np.testing.assert_allclose(dP[b], (Pp - Pm) / (2 * h), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(dw[b, :off[-1]], ((wp - wm) / (2 * h))[:off[-1]],
                                   rtol=1e-6, atol=1e-8)


def test_handlers_are_made_per_kernel_state_count_and_lane_width():
    """One FFI target per kernel, constant count of states (2-4; others share one) and,
    for the tangent kernel, lane width (four lanes up to QUAD - 1 tangents), each
    compiled once, on first use."""
    assert sk.variant("tangent", 3, 1) == ("diffcoffea_single_tangent_s3_l4", 2, QUAD)
    assert sk.variant("tangent", 3, QUAD) == ("diffcoffea_single_tangent_s3_l8", 2, LANES)
    assert sk.variant("tangent", 6, 0) == ("diffcoffea_single_tangent_sn_l4", -1, QUAD)
    assert sk.variant("primal", 1, 9) == ("diffcoffea_single_primal_sn", -1, 0)
    assert sk.variant("cotangent", 4, 9) == ("diffcoffea_single_cotangent_s4", 3, 0)
    name = sk.target("primal", 3)
    assert name == "diffcoffea_single_primal_s3" and name in sk.HANDLERS
    handler = sk.HANDLERS[name]
    assert sk.target("primal", 3, 5) == name and sk.HANDLERS[name] is handler


def test_kernels_that_inline_the_walk_are_keyed_by_it():
    """numba keys a cache by the function's own file: own processors' kernels (another
    file) inline the walk, so their cache index is keyed by the contents of chainwalk.py
    and the modules of analysis.select.lanes too (a change to the walk, its steps or its
    lanes recompiles them instead of loading stale machine code); the walks inline
    analysis.select.lanes: keyed by its modules too."""
    shared = sorted(str(p) for p in Path(policy.__file__).parent.glob("*.py"))
    assert list(cw.SOURCES) == [cw.__file__, *shared] and len(shared) >= 4
    handler = sk.HANDLERS[sk.target("primal", 3)]
    files = handler._cache._cache_file
    assert type(files) is CheckedCacheFile and files.depends[:len(cw.SOURCES)] == cw.SOURCES
    for kernel in (cw.cut_walk, cw.sens_walk):
        files = kernel._cache._cache_file
        assert type(files) is CheckedCacheFile and files.depends == cw.SOURCES[1:], kernel
