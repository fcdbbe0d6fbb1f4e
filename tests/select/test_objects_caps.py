"""Caps and bad models in analysis.select.objects: a clear error or NaN, never a silent bias.

- A count threshold beyond its cap: NaN results (gradient 0, finite); at the cap: exact.
- An event with more objects than ``max_objects``: ``check_counts`` raises one line;
  traced, that event's results are NaN and the other events are unaffected.
- Too many candidate tuples: ``ObjectCapError`` naming the observable.
- Model errors name the set: unknown parent, cycle, parent of another collection,
  count over an unknown set, bad op, duplicate set.
- Empty input (0 events, or events without objects) gives empty / trivial results.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import analysis  # noqa: F401  (float64)
from analysis.errors import ConfigError, DiffcoffeaError
from analysis.select.objects import (
    Count,
    CountModel,
    ObjectCapError,
    ObjectSet,
    check_counts,
    event_pass,
    layout,
    leading,
    membership,
    object_weights,
    required_cap,
)

JETS = (ObjectSet("jets", "Jet"),)


def one_event(q, max_objects=None):
    q = np.asarray(q, dtype=np.float64)[None, :]
    n = q.shape[1]
    return {"jets": jnp.asarray(q)}, {"Jet": layout([0], [n], max_objects or n)}


@pytest.mark.parametrize("op", [">", ">=", "<", "<=", "=="])
def test_threshold_at_and_beyond_cap(op):
    probs, lays = one_event([0.3, 0.6, 0.9, 0.5])
    cap = 2
    model = CountModel(JETS, (Count(("jets",), op, cap),))
    # Exact reference: the full (uncapped) Poisson-binomial of 4 objects.
    big = CountModel(JETS, (Count(("jets",), op, 5),))
    for n in range(0, 4):
        th = jnp.asarray([float(n)])
        exact = event_pass(probs, lays, big, th)
        got = event_pass(probs, lays, model, th)
        if required_cap(op, n) <= cap:
            np.testing.assert_allclose(got, exact, rtol=0, atol=1e-15)
        else:
            assert np.isnan(got[0]), (op, n)
            g = jax.grad(lambda q, th=th: event_pass({"jets": q}, lays, model, th)[0])(
                probs["jets"]
            )
            assert np.all(np.isfinite(np.asarray(g)))


def test_required_cap():
    assert [required_cap(op, 2) for op in (">", ">=", "<", "<=", "==")] == [3, 2, 2, 3, 3]


def test_max_objects():
    counts = np.array([2, 5, 1])
    with pytest.raises(ObjectCapError, match=r"'Jet': event 1 has 5 objects.*max_objects=4"):
        check_counts(counts, 4, collection="Jet")
    check_counts(counts, 5, collection="Jet")
    assert issubclass(ObjectCapError, DiffcoffeaError)
    # Traced: the overflowing event is NaN, the others exact.
    q = jnp.asarray(np.linspace(0.1, 0.9, 8))
    starts = np.cumsum(counts) - counts
    model = CountModel(JETS, (Count(("jets",), ">=", 1),))
    lays4 = {"Jet": layout(starts, counts, 4)}
    lays5 = {"Jet": layout(starts, counts, 5)}
    th = jnp.asarray([1.0])
    p4 = event_pass({"jets": lays4["Jet"].dense(q)}, lays4, model, th)
    p5 = event_pass({"jets": lays5["Jet"].dense(q)}, lays5, model, th)
    assert np.isnan(p4[1]) and not np.isnan(p5[1])
    np.testing.assert_array_equal(np.asarray(p4)[[0, 2]], np.asarray(p5)[[0, 2]])
    w = np.asarray(object_weights({"jets": lays4["Jet"].dense(q)}, lays4, model, th)["jets"])
    assert np.all(np.isnan(w[1])) and not np.any(np.isnan(w[[0, 2]]))
    m = membership({"jets": lays4["Jet"].dense(q)}, lays4, model)["jets"]
    assert np.all(np.isnan(m[1]))


def test_max_tuples():
    probs, lays = one_event(np.full(10, 0.5))
    model = CountModel(JETS)
    with pytest.raises(ObjectCapError, match=r"jets\[0\] \+ jets\[2\]: 120 candidate tuples"):
        leading(probs, lays, model, [], [("jets", 0), ("jets", 2)], {"jets": probs["jets"]},
                max_tuples=100)  # fmt: skip


@pytest.mark.parametrize(
    ("sets", "counts", "message"),
    [
        ((ObjectSet("b", "Jet", parent="jets"),), (), "'b': parent 'jets' is not a set"),
        (
            (ObjectSet("a", "Jet", parent="b"), ObjectSet("b", "Jet", parent="a")),
            (),
            "cycle in parents",
        ),
        (
            (ObjectSet("jets", "Jet"), ObjectSet("m", "Muon", parent="jets")),
            (),
            "'m': parent 'jets' is a set of 'Jet', not 'Muon'",
        ),
        (JETS, (Count(("jest",), ">=", 1),), "'jest' is not a set"),
        (JETS, (Count(("jets",), "=>", 1),), "op '=>'"),
        (JETS + JETS, (), "'jets' is defined twice"),
    ],
)
def test_model_errors(sets, counts, message):
    with pytest.raises(ConfigError, match=message):
        CountModel(sets, counts)


def test_empty_inputs():
    model = CountModel(
        (ObjectSet("jets", "Jet"), ObjectSet("bjets", "Jet", parent="jets")),
        (Count(("jets",), ">=", 1), Count(("bjets",), "<", 1)),
    )
    th = jnp.asarray([1.0, 1.0])
    empty = {"Jet": layout(np.zeros(0, int), np.zeros(0, int), 3)}
    probs = {"jets": jnp.zeros((0, 3)), "bjets": jnp.zeros((0, 3))}
    assert event_pass(probs, empty, model, th).shape == (0,)
    assert object_weights(probs, empty, model, th)["bjets"].shape == (0, 3)
    (i, j), w = leading(
        probs, empty, model, th, [("jets", 0), ("jets", 1)], {"jets": probs["jets"]}
    )
    assert w.shape == (0, 3) and i.shape == (0, 3)
    # An index beyond max_objects: no candidate at all.
    two = {"Jet": layout([0], [2], 2)}
    probs2 = {"jets": jnp.ones((1, 2)), "bjets": jnp.ones((1, 2))}
    (k,), w = leading(probs2, two, model, th, [("jets", 2)], {"jets": probs2["jets"]})
    assert w.shape == (1, 0) and k.shape == (1, 0)
    # Events without objects: no count passes ">= 1"; "< 1" always passes.
    none = {"Jet": layout(np.zeros(2, int), np.zeros(2, int), 1)}
    probs = {"jets": jnp.ones((2, 1)), "bjets": jnp.ones((2, 1))}
    np.testing.assert_array_equal(event_pass(probs, none, model, th), [0.0, 0.0])
    only_b = CountModel(model.sets, (Count(("bjets",), "<", 1),))
    np.testing.assert_array_equal(event_pass(probs, none, only_b, th[:1]), [1.0, 1.0])
    assert np.all(np.asarray(object_weights(probs, none, only_b, th[:1])["jets"]) == 0)


def test_shifts_match_transfer_map():
    """The slice-based recursions equal the explicit transfer map ``tgt_p``: pulling a
    value reads ``g[tgt_p]``, pushing a distribution is its adjoint (mass preserved)."""
    from analysis.select.objects import _pull, _shift
    model = CountModel(
        (ObjectSet("jets", "Jet"), ObjectSet("bjets", "Jet", parent="jets")),
        (Count(("jets",), ">=", 3), Count(("jets", "bjets"), "<", 2), Count(("bjets",), "==", 0)),
    )
    rng = np.random.default_rng(0)
    g = jnp.asarray(rng.random((2, model.n_states)))
    x = jnp.asarray(rng.random((2, model.n_states)))
    for p, d in enumerate(model.increments["Jet"]):
        tgt = model.targets["Jet"][p]
        np.testing.assert_array_equal(_pull(g, d, model.shape), np.asarray(g)[:, tgt])
        pushed = np.zeros((2, model.n_states))
        np.add.at(pushed, (slice(None), tgt), np.asarray(x))
        np.testing.assert_allclose(_shift(x, d, model.shape), pushed, rtol=1e-15)
