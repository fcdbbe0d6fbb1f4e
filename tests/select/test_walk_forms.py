"""The count-state walk's two forms (analysis.select._recursions): one source, two layouts.

The walk holds a count state as an ``(events, states)`` table (the engine) or as one
vector per state (the one-set walk over flat lists, :func:`dense_weights`: own
processors' JAX path); the same steps, so the two agree to rounding, values and
forward-mode derivatives, and the one-set walk is the exact expectation of the hard cut
(every pass/fail configuration enumerated).
"""

from __future__ import annotations

import itertools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import analysis  # noqa: F401  (float64)
from analysis.select._recursions import (
    _backward,
    _ends,
    _forward,
    _weights_backward,
    dense_weights,
)
from analysis.select.objects import Count, CountModel, ObjectSet, _pass_table

E, M = 300, 7


def _one_set(cap: int) -> CountModel:
    return CountModel((ObjectSet("j", "J"),), (Count(("j",), ">=", cap),))


def _walk(theta, pi0, model, *, states: bool):
    """Values of every piece of the walk over one collection: F, the stack, G_0, wp."""
    c = model.collections[0]
    d, shape = model.increments[c], model.shape
    f, _ = _pass_table(model, jnp.asarray([theta[1]]), jnp.asarray([0.3]))
    q = jax.nn.sigmoid((pi0 - theta[0]) / 0.1)
    pi = jnp.stack([1.0 - q, q], axis=-1)
    F, G = _ends(f, E, states)
    F, before = _forward(F, pi, d, shape)
    g0, wp = _weights_backward(G, pi, before, d, shape)
    g1 = _backward(G, pi, d, shape)
    out = [F, before, g0, g1]
    if states:
        out = [jnp.stack(x, axis=-1) for x in out]
    return (*out, wp)


@pytest.mark.parametrize("cap", [1, 3, 5])
def test_per_state_is_the_table(cap):
    """Values and jacfwd of the walk's pieces, per state against the table: to rounding
    (1e-15 of each piece's largest entry)."""
    model = _one_set(cap)
    pi0 = jnp.asarray(np.random.default_rng(cap).uniform(0.0, 1.0, (E, M)))
    theta = jnp.asarray([0.5, cap - 0.4])
    got = {}
    for states in (False, True):
        fn = jax.jit(partial(_walk, pi0=pi0, model=model, states=states))
        got[states] = (fn(theta), jax.jit(jax.jacfwd(fn))(theta))
    pairs = zip(jax.tree.leaves(got[False]), jax.tree.leaves(got[True]), strict=True)
    for a, b in pairs:
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-15 * max(1.0, np.abs(a).max()))


def _enumerated(q, counts, n):
    """Per event ``P(K >= n)`` and per object ``P(j passes and K >= n)``, by every
    pass/fail configuration."""
    ev, obj, start = [], [], 0
    for c in counts:
        qe = q[start:start + c]
        p_ev, w = 0.0, np.zeros(c)
        for bits in itertools.product((0, 1), repeat=c):
            b = np.array(bits, dtype=bool)
            prob = float(np.prod(np.where(b, qe, 1.0 - qe)))
            if b.sum() >= n:
                p_ev += prob
                w += prob * b
        ev.append(p_ev)
        obj.extend(w)
        start += c
    return np.array(obj), np.array(ev)


@pytest.mark.parametrize("n", [0, 1, 2, 4])
def test_one_set_walk_against_enumeration(n):
    """dense_weights (the walk per state, in event blocks over flat lists, several blocks
    with a partial last one) is the exact expectation of the hard cut."""
    rng = np.random.default_rng(n)
    counts = rng.integers(0, 7, 700)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    q = rng.uniform(0.0, 1.0, int(offsets[-1]))
    q[rng.uniform(size=q.shape) < 0.1] = 1.0  # certain objects: exact at p in {0, 1}
    event = np.repeat(np.arange(len(counts)), counts).astype(np.int32)
    model = _one_set(max(n, 1))
    f, _ = _pass_table(model, jnp.asarray([float(n)]))
    obj, ev = dense_weights(jnp.asarray(q), jnp.asarray(offsets), jnp.asarray(event), f,
                            max_objects=40)  # blocks of 256-512 events
    want_obj, want_ev = _enumerated(q, counts, n)
    np.testing.assert_allclose(np.asarray(ev), want_ev, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.asarray(obj), want_obj, rtol=1e-12, atol=1e-15)
