"""Trainable count thresholds of the object-set form (analysis.select.objects), issue 8.

A count condition ``K op n`` with a real threshold ``n`` and width ``w`` is the
single-collection form's soft integer step: the decision
``(1 - s) [K op floor n] + s [K op floor n + 1]`` with ``s = integer_step(frac n, w)``
(``analysis.select.pbinom``). The reference (the enumeration oracle of tests/reference)
enumerates every pass/fail configuration of small events, builds that blended decision from the formula (written out here in numpy) and
weights it by the configuration's probability: pass probabilities, per-object weights,
sum moments and leading candidates must agree to 1e-10; the threshold gradients must
agree with central finite differences and be non-zero (they were 0 before).
"""

from __future__ import annotations

from collections import defaultdict

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import analysis  # noqa: F401  (float64)
from analysis.select.objects import (
    Count,
    CountModel,
    ObjectSet,
    event_pass,
    layout,
    leading,
    object_weights,
    sum_moments,
)
from tests.conftest import central_difference
from tests.reference import members, ranked

SETS = (
    ObjectSet("jets", "Jet"),
    ObjectSet("bjets", "Jet", parent="jets"),
    ObjectSet("muons", "Muon"),
)
COLL = {"jets": "Jet", "bjets": "Jet", "muons": "Muon"}
M = {"Jet": 5, "Muon": 2}
# every op, a count over two sets, real thresholds (with integer parts and fractions)
COUNTS = (
    Count(("jets",), ">=", 5),
    Count(("jets", "bjets"), ">", 6),
    Count(("muons",), "<", 3),
    Count(("bjets",), "==", 4),
    Count(("jets",), "<=", 6),
)
THRESHOLDS = np.array([2.3, 1.6, 1.45, 0.4, 3.7])
WIDTHS = np.array([0.7, 0.3, 1.0, 0.5, 2.0])
OPS = {">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal, "==": np.equal}


def step(frac, width):
    """integer_step's formula (its docstring), in numpy."""

    def sig(z):
        return 1.0 / (1.0 + np.exp(-z))

    lo, hi = sig(-0.5 / width), sig(0.5 / width)
    return (sig((frac - 0.5) / width) - lo) / (hi - lo)


def events(seed=4, n=6):
    rng = np.random.default_rng(seed)
    counts = {"Jet": rng.integers(1, M["Jet"] + 1, n), "Muon": rng.integers(0, M["Muon"] + 1, n)}
    counts["Jet"][0] = M["Jet"]
    probs = {}
    for s in SETS:
        q = rng.uniform(0.1, 0.9, (n, M[COLL[s.name]]))
        q[rng.random(q.shape) < 0.1] = 1.0
        probs[s.name] = q
    pt = {c: np.round(rng.uniform(20, 90, (n, m)), 0) for c, m in M.items()}
    return counts, probs, pt


def enumerate_event(e, counts, probs, pt, thresholds, widths):
    own = {s.name: probs[s.name][e, : counts[COLL[s.name]][e]] for s in SETS}
    member, prob = members(own, {s.name: s.parent for s in SETS})
    member = {  # padded to the layout's width M
        name: np.pad(m, ((0, 0), (0, M[COLL[name]] - m.shape[1]))) for name, m in member.items()
    }
    k = {name: m.sum(axis=1) for name, m in member.items()}
    decision = np.ones(len(prob))
    for c, n, w in zip(COUNTS, thresholds, widths):
        total = sum(k[name] for name in c.sets)
        lo = np.floor(n)
        s = step(n - lo, w)
        decision *= (1 - s) * OPS[c.op](total, lo) + s * OPS[c.op](total, lo + 1)
    wp = prob * decision
    ht = member["jets"] @ pt["Jet"][e]
    out = {
        "pass": wp.sum(),
        "weights": {name: wp @ m for name, m in member.items()},
        "moments": np.array([wp @ ht**r for r in range(3)]),
    }
    for name, depth in (("jets", 2), ("muons", 0)):
        c = COLL[name]
        m = counts[c][e]
        picks = np.stack([ranked(member[name][:, :m], pt[c][e, :m], r) for r in range(depth + 1)])
        table: dict[tuple, float] = defaultdict(float)
        for row in np.flatnonzero(wp * np.all(picks >= 0, axis=0)):
            table[tuple(int(j) for j in picks[:, row])] += wp[row]
        out[name] = table
    return out


@pytest.fixture(scope="module")
def data():
    counts, probs, pt = events()
    lays = {c: layout(np.cumsum(n) - n, n, M[c]) for c, n in counts.items()}
    return counts, probs, pt, lays


def test_soft_thresholds_against_enumeration(data):
    counts, probs, pt, lays = data
    model = CountModel(SETS, COUNTS)
    jp = {k: jnp.asarray(v) for k, v in probs.items()}
    th, cw = jnp.asarray(THRESHOLDS), jnp.asarray(WIDTHS)
    p = np.asarray(event_pass(jp, lays, model, th, cw))
    w = {k: np.asarray(v) for k, v in object_weights(jp, lays, model, th, cw).items()}
    mom = np.asarray(sum_moments(jp, lays, model, th, {"jets": pt["Jet"]}, cw, order=2))
    lead = {
        "jets": leading(
            jp, lays, model, th, [("jets", 0), ("jets", 1), ("jets", 2)], {"jets": pt["Jet"]}, cw
        ),
        "muons": leading(jp, lays, model, th, [("muons", 0)], {"muons": pt["Muon"]}, cw),
    }
    for e in range(len(counts["Jet"])):
        ref = enumerate_event(e, counts, probs, pt, THRESHOLDS, WIDTHS)
        assert abs(p[e] - ref["pass"]) < 1e-10
        for name in w:
            np.testing.assert_allclose(w[name][e], ref["weights"][name], rtol=0, atol=1e-10)
        np.testing.assert_allclose(mom[e], ref["moments"], rtol=1e-10, atol=1e-10)
        for name, (index, weight) in lead.items():
            got: dict[tuple, float] = defaultdict(float)
            for t in range(weight.shape[1]):
                got[tuple(int(i[e, t]) for i in index)] += float(weight[e, t])
            for key in set(got) | set(ref[name]):
                assert abs(got.get(key, 0.0) - ref[name].get(key, 0.0)) < 1e-10, (name, e, key)
    assert 0 < p.min() and p.max() < 1  # the blend is not a trivial 0 or 1


def test_integer_thresholds_are_the_hard_conditions(data):
    """At integer ``n`` every width gives the hard condition; width 0 rounds ``n``."""
    _, probs, _, lays = data
    model = CountModel(SETS, COUNTS)
    jp = {k: jnp.asarray(v) for k, v in probs.items()}
    n = jnp.asarray(np.round(THRESHOLDS))
    hard = event_pass(jp, lays, model, n)
    np.testing.assert_array_equal(event_pass(jp, lays, model, n, jnp.asarray(WIDTHS)), hard)
    np.testing.assert_array_equal(event_pass(jp, lays, model, jnp.asarray(THRESHOLDS)), hard)


@pytest.mark.parametrize("at", ["fraction", "integer"])
def test_threshold_gradient_matches_finite_differences(data, at):
    """Central differences at a fractional ``n``; at an integer ``n`` the step has a
    kink (``floor``): the gradient is the right derivative, as the single-collection
    form's, checked with a forward difference."""
    _, probs, _, lays = data
    model = CountModel(SETS, COUNTS)
    jp = {k: jnp.asarray(v) for k, v in probs.items()}
    x0 = THRESHOLDS if at == "fraction" else np.round(THRESHOLDS)
    cw = jnp.asarray(WIDTHS)

    def f(x):
        return np.asarray(event_pass(jp, lays, model, jnp.asarray(x), cw))

    jac = np.asarray(jax.jacfwd(lambda x: event_pass(jp, lays, model, x, cw))(jnp.asarray(x0)))
    if at == "fraction":
        fd = central_difference(f, x0, 1e-6)
        np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-9)
    else:
        h = 1e-7
        fd = np.stack(
            [(f(x0 + h * np.eye(len(x0))[i]) - f(x0)) / h for i in range(len(x0))], axis=1
        )
        np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-7)
    # Every threshold moves the pass (0 before issue 8's count steps); at the integers
    # jets >= 2 cannot: jets + bjets > 2 with bjets == 0 needs three jets.
    moved = np.abs(jac).max(axis=0) > 1e-3
    assert np.all(moved) if at == "fraction" else moved.sum() == len(x0) - 1
