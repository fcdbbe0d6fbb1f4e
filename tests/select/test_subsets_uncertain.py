"""Histograms of event sums with deterministic objects folded out and meet in the middle
(analysis.select.subsets.sum_bins, 13-20 uncertain objects) against the enumeration
oracle (tests/reference): every configuration of the *uncertain* own-cut bits, the
certain ones fixed, each configuration's hard-cut members, count conditions and event
sum built with numpy. Gradients and second derivatives against central differences of
the oracle (it is multilinear in each pass probability: the differences are exact up to
rounding).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis.select.objects import Count, CountModel, ObjectSet, layout
from analysis.select.subsets import sum_bins, uncertain_mask
from tests.reference import configurations, soft_bins

SETS = (ObjectSet("jets", "Jet"), ObjectSet("bjets", "Jet", parent="jets"),
        ObjectSet("leps", "Lep"))
# >= 4 jets, exactly 1 b-jet, >= 1 lepton (the caps: 4, 2, 1)
MODEL = CountModel(SETS, (Count(("jets",), ">=", 4), Count(("bjets",), "==", 2),
                          Count(("leps",), ">=", 1)))
THRESH = jnp.asarray([4.0, 1.0, 1.0])
EDGES = (150.0, 300.0, 450.0, 600.0, 800.0)
M = 24
UNCERTAIN = (13, 17, 20, 9)  # per event: objects with an uncertain pattern


def events(seed: int = 7) -> dict:
    """Four events of 24 jets: ``UNCERTAIN[e] - 1`` jets uncertain in ``jets``, one more
    certain in ``jets`` (passes) but uncertain in ``bjets``; the rest fail or pass with
    probability exactly 0 or 1 (events 1 and 3: one of them a certain b-jet); one
    lepton of probability 0.8."""
    rng = np.random.default_rng(seed)
    qj = np.zeros((len(UNCERTAIN), M))
    qb = np.zeros_like(qj)
    for e, u in enumerate(UNCERTAIN):
        perm = rng.permutation(M)  # uncertain objects spread over the axis
        qj[e, perm[: u - 1]] = rng.uniform(0.05, 0.95, u - 1)
        qj[e, perm[u - 1]] = 1.0
        qb[e, perm[u - 1]] = 0.6
        rest = perm[u:]
        qj[e, rest] = rng.integers(0, 2, len(rest))
        if e % 2:  # one certain b-jet: the uncertain one must fail for == 1
            qj[e, rest[0]] = qb[e, rest[0]] = 1.0
    return {"jets": qj, "bjets": qb, "leps": np.full((len(UNCERTAIN), 1), 0.8),
            "pt": rng.uniform(15.0, 90.0, qj.shape)}


def inputs(ev: dict):
    e = len(UNCERTAIN)
    lays = {"Jet": layout(np.arange(e) * M, np.full(e, M), M),
            "Lep": layout(np.arange(e), np.ones(e, np.int64), 1)}
    probs = {k: jnp.asarray(ev[k]) for k in ("jets", "bjets", "leps")}
    return lays, probs, jnp.asarray(ev["pt"])


def oracle(ev: dict, e: int, name: str = "jets", width: float = 0.0,
           edges=EDGES) -> np.ndarray:
    """``P(pass, HT in bin)`` of event ``e`` over every configuration of its uncertain
    bits, HT the sum of the pT of the set ``name`` (``jets`` or ``bjets``); ``width >
    0``: each configuration's HT spread over the bins by the soft-bin formula of issue
    50 (:func:`tests.reference.soft_bins`) at ``edges``."""
    own = np.concatenate([ev["jets"][e], ev["bjets"][e], ev["leps"][e]])
    free = (own > 0.0) & (own < 1.0)
    conf, prob = configurations(own[free])
    bits = np.broadcast_to(own == 1.0, (len(prob), len(own))).copy()
    bits[:, free] = conf
    jets, bjets, leps = bits[:, :M], bits[:, M: 2 * M] & bits[:, :M], bits[:, 2 * M:]
    ok = (jets.sum(1) >= 4) & (bjets.sum(1) == 1) & (leps.sum(1) >= 1)
    ht = (jets if name == "jets" else bjets).astype(np.float64) @ ev["pt"][e]
    if width > 0.0:
        return (prob * ok) @ soft_bins(edges, ht, width)
    out = np.zeros(len(edges) + 1)
    np.add.at(out, np.searchsorted(edges, ht, side="right"), prob * ok)
    return out


_bins = jax.jit(sum_bins, static_argnames=("model", "name", "edges", "n_uncertain"))


def test_uncertain_count_and_bins_against_enumeration() -> None:
    ev = events()
    lays, probs, pt = inputs(ev)
    unc = np.asarray(uncertain_mask(probs, lays, MODEL, "jets"))
    # the jet certain in jets with an uncertain b-tag is decided for a sum over jets
    # (analysis.select.certain), uncertain for one over bjets; a jet uncertain in jets
    # without a b-tag is decided (out) for bjets
    assert unc.sum(1).tolist() == [u - 1 for u in UNCERTAIN]
    unc_b = np.asarray(uncertain_mask(probs, lays, MODEL, "bjets"))
    assert unc_b.sum(1).tolist() == [1] * len(UNCERTAIN)
    got = np.asarray(_bins(probs, lays, MODEL, THRESH, pt, "jets", EDGES, n_uncertain=20))
    for e in range(len(UNCERTAIN)):
        want = oracle(ev, e)
        assert want.sum() > 0.05
        np.testing.assert_allclose(got[e], want, rtol=1e-10, atol=1e-14, err_msg=str(e))
    # a width too small for an event: NaN there (never a silent bias), the others exact
    few = np.asarray(_bins(probs, lays, MODEL, THRESH, pt, "jets", EDGES, n_uncertain=15))
    assert np.isnan(few[1:3]).all() and not np.isnan(few[[0, 3]]).any()
    np.testing.assert_allclose(few[3], got[3], rtol=1e-12, atol=1e-15)


def _tangent(ev: dict, e: int, j: int) -> dict:
    t = {k: np.zeros_like(ev[k]) for k in ("jets", "bjets", "leps")}
    t["jets"][e, j] = 1.0
    return {k: jnp.asarray(v) for k, v in t.items()}


def _moved(ev: dict, moves) -> dict:
    out = {k: v.copy() for k, v in ev.items()}
    for e, j, h in moves:
        out["jets"][e, j] += h
    return out


@pytest.mark.slow
def test_first_and_second_derivatives_against_differences() -> None:
    ev = events()
    lays, probs, pt = inputs(ev)
    e = 1  # 17 uncertain objects: meet in the middle
    j, k = np.flatnonzero((ev["jets"][e] > 0) & (ev["jets"][e] < 1))[[0, 9]]

    def f(p):
        return sum_bins(p, lays, MODEL, THRESH, pt, "jets", EDGES, n_uncertain=20)

    def df(p, tj):
        return jax.jvp(f, (p,), (tj,))[1]

    tj, tk = _tangent(ev, e, j), _tangent(ev, e, k)
    d1 = np.asarray(jax.jit(df)(probs, tj))[e]
    d2 = np.asarray(jax.jit(lambda p: jax.jvp(lambda q: df(q, tj), (p,), (tk,))[1])(probs))[e]
    h = 1e-3
    fd1 = (oracle(_moved(ev, [(e, j, h)]), e) - oracle(_moved(ev, [(e, j, -h)]), e)) / (2 * h)
    fd2 = sum(s1 * s2 * oracle(_moved(ev, [(e, j, s1 * h), (e, k, s2 * h)]), e)
              for s1 in (1, -1) for s2 in (1, -1)) / (4 * h * h)
    assert np.abs(fd1).max() > 1e-3 and np.abs(fd2).max() > 1e-3
    np.testing.assert_allclose(d1, fd1, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(d2, fd2, rtol=1e-6, atol=1e-8)
