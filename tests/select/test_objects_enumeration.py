"""Soft object sets against exact enumeration (analysis.select.objects).

The reference (the enumeration oracle of tests/reference) enumerates, per small random
event, every pass/fail configuration of every object's own cuts (one independent
Bernoulli per object and set: a jet's b-tag bit exists even when the jet fails, it
just does not matter then), builds the hard-cut
state of each configuration (set members, counts, the decision, the ranked members)
and weights it by its probability. Joint count distributions, event pass
probabilities, per-object weights and leading-object candidates must agree to 1e-10.
"""

from __future__ import annotations

from collections import defaultdict

import jax.numpy as jnp
import numpy as np
import pytest

import analysis  # noqa: F401  (float64)
from analysis.select.objects import (
    Count,
    CountModel,
    ObjectSet,
    event_pass,
    joint_distribution,
    layout,
    leading,
    object_weights,
    sum_moments,
)
from tests.conftest import AGC_SETS
from tests.reference import configurations, members, ranked

SETS = AGC_SETS
COLLECTION = {s.name: s.collection for s in SETS}
PARENT = {s.name: s.parent for s in SETS}
M = {"Jet": 6, "Muon": 2, "Electron": 2}

# (counts, thresholds): the AGC-like selection, a shared variable (jets twice), a count
# with multiplicity (a b-jet counts twice in [jets, bjets]) and every op.
MODELS = {
    "agc": (
        (
            Count(("jets",), ">=", 3),
            Count(("bjets",), ">=", 1),
            Count(("muons", "electrons"), "==", 2),
        ),
        (3.0, 1.0, 1.0),
    ),
    "ops": (
        (
            Count(("jets",), ">", 5),
            Count(("jets",), "<=", 4),
            Count(("jets", "bjets"), "<", 5),
            Count(("electrons",), "<=", 2),
            Count(("muons",), "==", 3),
        ),
        (1.0, 4.0, 5.0, 1.0, 0.0),
    ),
    "none": ((), ()),
}

SLOTS = (
    (("jets", 0),),
    (("jets", 1),),
    (("jets", 0), ("jets", 1)),
    (("jets", 0), ("jets", 1), ("jets", 2)),
    (("bjets", 0), ("bjets", 1)),
    (("muons", 0), ("bjets", 0)),
    (("jets", 0), ("bjets", 0)),
    (("electrons", 0), ("muons", 0)),
)

OPS = {
    ">": np.greater,
    ">=": np.greater_equal,
    "<": np.less,
    "<=": np.less_equal,
    "==": np.equal,
}


def random_events(seed: int, n_events: int):
    """Counts, own probabilities (some exactly 0 or 1) and ranks of small events."""
    rng = np.random.default_rng(seed)
    counts = {
        "Jet": rng.integers(0, M["Jet"] + 1, n_events),
        "Muon": rng.integers(0, M["Muon"] + 1, n_events),
        "Electron": rng.integers(0, M["Electron"] + 1, n_events),
    }
    counts["Jet"][0] = M["Jet"]  # at least one full event
    probs = {}
    for s in SETS:
        q = rng.uniform(0.05, 0.95, (n_events, M[s.collection]))
        edge = rng.random(q.shape)
        q = np.where(edge < 0.1, 0.0, np.where(edge > 0.9, 1.0, q))
        probs[s.name] = q
    rank = {
        c: np.round(rng.uniform(20, 100, (n_events, m)), 0)  # some ties on purpose
        for c, m in M.items()
    }
    return counts, probs, rank


def enumerate_event(e, counts, probs, rank, model_counts, thresholds, slots_list):
    """Exact expectations for event ``e`` by summing over all configurations."""
    own = {s.name: probs[s.name][e, : counts[s.collection][e]] for s in SETS}
    member, prob = members(own, PARENT)
    member = {  # padded to the layout's width M
        name: np.pad(m, ((0, 0), (0, M[COLLECTION[name]] - m.shape[1])))
        for name, m in member.items()
    }
    k = {s.name: member[s.name].sum(axis=1) for s in SETS}
    passed = np.ones(len(prob), dtype=bool)
    for c, t in zip(model_counts, thresholds):
        total = sum(k[name] for name in c.sets)
        passed &= OPS[c.op](total, t)
    wp = prob * passed

    out = {"pass": wp.sum(), "weights": {}, "leading": []}
    x = sum(member[name][:, : M[COLLECTION[name]]] @ v[e] for name, v in sum_values(rank).items())
    out["moments"] = np.array([(wp * x**r).sum() for r in range(3)])
    for s in SETS:
        out["weights"][s.name] = (wp[:, None] * member[s.name]).sum(axis=0)
    # Joint distribution of the model's variables (capped), as the model orders them.
    model = CountModel(SETS, tuple(model_counts))
    joint = np.zeros(model.shape)
    if not model.shape:
        joint = np.array(prob.sum())
    idx = tuple(np.minimum(sum(k[name] for name in names), cap) for names, cap in model.variables)
    if model.shape:
        np.add.at(joint, idx, prob)
    out["joint"] = joint
    for slots in slots_list:
        table: dict[tuple[int, ...], float] = defaultdict(float)
        picks = []
        for name, r in slots:
            c = COLLECTION[name]
            m = counts[c][e]
            picks.append(ranked(member[name][:, :m], rank[c][e, :m], r))
        exists = np.all([p >= 0 for p in picks], axis=0)
        keep = exists & (wp > 0)
        for row in np.flatnonzero(keep):
            table[tuple(int(p[row]) for p in picks)] += wp[row]
        out["leading"].append(dict(table))
    return out


def sum_values(rank):
    """Per-set values of the event sum X (as HT; a b-jet adds its jets and bjets terms)."""
    return {"jets": rank["Jet"] / 100, "bjets": rank["Jet"] / 1000, "muons": rank["Muon"] / 50}


@pytest.fixture(scope="module")
def events():
    return random_events(seed=8, n_events=10)


def _layouts(counts):
    return {c: layout(np.cumsum(n) - n, n, M[c]) for c, n in counts.items()}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("agc", marks=pytest.mark.slow),
        pytest.param("ops", marks=pytest.mark.slow),
        "none",
    ],
)  # agc compiles every slot kind (~20 s on a loaded 2-core machine)
def test_against_enumeration(events, name):
    counts, probs, rank = events
    model_counts, thresholds = MODELS[name]
    model = CountModel(SETS, model_counts)
    lays = _layouts(counts)
    jprobs = {k: jnp.asarray(v) for k, v in probs.items()}
    th = jnp.asarray(thresholds, dtype=jnp.float64)
    p = np.asarray(event_pass(jprobs, lays, model, th))
    w = {k: np.asarray(v) for k, v in object_weights(jprobs, lays, model, th).items()}
    joint = np.asarray(joint_distribution(jprobs, lays, model))
    values = {k: jnp.asarray(v) for k, v in sum_values(rank).items()}
    moments = np.asarray(sum_moments(jprobs, lays, model, th, values, order=2))
    ranks = {s.name: rank[s.collection] for s in SETS}
    # Every slot kind on the AGC-like model; two on the others (each one compiles).
    slots_list = SLOTS if name == "agc" else SLOTS[2:4]
    lead = []
    for slots in slots_list:
        index, weight = leading(jprobs, lays, model, th, slots, ranks)
        lead.append((tuple(np.asarray(i) for i in index), np.asarray(weight)))
    n_events = len(counts["Jet"])
    for e in range(n_events):
        ref = enumerate_event(e, counts, probs, rank, model_counts, thresholds, slots_list)
        np.testing.assert_allclose(p[e], ref["pass"], rtol=0, atol=1e-10)
        np.testing.assert_allclose(joint[e], ref["joint"], rtol=0, atol=1e-10)
        np.testing.assert_allclose(moments[e], ref["moments"], rtol=1e-10, atol=1e-10)
        for s in SETS:
            m = counts[s.collection][e]
            np.testing.assert_allclose(w[s.name][e, :m], ref["weights"][s.name][:m], atol=1e-10)
            assert np.all(w[s.name][e, m:] == 0)  # padding
        for slots, (index, weight), table in zip(slots_list, lead, ref["leading"]):
            got: dict[tuple[int, ...], float] = defaultdict(float)
            for t in range(weight.shape[1]):
                got[tuple(int(ix[e, t]) for ix in index)] += float(weight[e, t])
            for key in set(got) | set(table):
                assert abs(got.get(key, 0.0) - table.get(key, 0.0)) < 1e-10, (slots, e, key)


def test_twelve_objects():
    """One event of 12 jets (4096 configurations): counts, weights and the leading triple."""
    rng = np.random.default_rng(12)
    sets = (ObjectSet("jets", "Jet"),)
    model = CountModel(sets, (Count(("jets",), ">=", 4), Count(("jets",), "<", 9)))
    q = rng.uniform(0.1, 0.9, (1, 12))
    pt = rng.uniform(20, 200, (1, 12))
    lays = {"Jet": layout([0], [12], 12)}
    th = jnp.asarray([4.0, 9.0])
    conf, prob = configurations(q[0])
    k = conf.sum(axis=1)
    wp = prob * ((k >= 4) & (k < 9))
    p = np.asarray(event_pass({"jets": q}, lays, model, th))
    np.testing.assert_allclose(p[0], wp.sum(), rtol=0, atol=1e-10)
    w = np.asarray(object_weights({"jets": q}, lays, model, th)["jets"])
    np.testing.assert_allclose(w[0], (wp[:, None] * conf).sum(axis=0), rtol=0, atol=1e-10)
    (i0, i1, i2), weight = leading(
        {"jets": q}, lays, model, th, [("jets", 0), ("jets", 1), ("jets", 2)], {"jets": pt}
    )
    i0, i1, i2, weight = map(np.asarray, (i0, i1, i2, weight))
    order = np.argsort(-pt[0], kind="stable")
    table: dict[tuple[int, ...], float] = defaultdict(float)
    for row in np.flatnonzero(wp > 0):
        sel = [j for j in order if conf[row, j]]
        table[tuple(sel[:3])] += wp[row]
    got: dict[tuple[int, ...], float] = defaultdict(float)
    for t in range(weight.shape[1]):
        got[(int(i0[0, t]), int(i1[0, t]), int(i2[0, t]))] += float(weight[0, t])
    assert len(table) > 50
    for key in set(got) | set(table):
        assert abs(got.get(key, 0.0) - table.get(key, 0.0)) < 1e-10, key
