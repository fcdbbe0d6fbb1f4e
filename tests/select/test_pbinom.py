"""Soft counts (analysis.select.pbinom): values and derivatives against independent references.

- values against exact enumeration of every pass/fail configuration of small events;
- first derivatives (forward and reverse mode) against ``jax.jacfwd`` of the plain
  recursion the pipeline used before (kept here as the reference) and against central
  finite differences;
- second derivatives (``jacfwd(jacfwd)``, as the Newton method uses) against the plain
  recursion's;
- edge cases: probabilities exactly 0 and 1 (hard cuts), events without objects,
  padding objects outside every event.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis.select import pbinom
from tests.reference import configurations

RTOL = 1e-10


def reference_recursion(p, starts, counts, cap: int, max_count: int):
    """The recursion ``analysis.pipeline.kernel.count_distribution`` ran before pbinom (verbatim
    maths): one object added per ``lax.scan`` step, differentiated by JAX itself."""
    n_events = starts.shape[0]
    q0 = jnp.zeros((n_events, cap + 1), p.dtype).at[:, 0].set(1.0)
    stays = jnp.ones(cap + 1, p.dtype).at[cap].set(0.0)

    def step(q, pos):
        valid = pos < counts
        pj = jnp.where(valid, p[jnp.where(valid, starts + pos, 0)], 0.0)[:, None]
        moved = jnp.pad(q[:, :-1], ((0, 0), (1, 0))) * pj
        return q * (1.0 - pj * stays) + moved, None

    q, _ = jax.lax.scan(step, q0, jnp.arange(max_count))
    return q


def enumerate_distribution(p, starts, counts, cap: int) -> np.ndarray:
    """Capped count distribution by summing over all 2^n pass/fail configurations."""
    out = np.zeros((len(starts), cap + 1))
    for e, (s, n) in enumerate(zip(starts, counts)):
        conf, prob = configurations(np.asarray(p[s : s + n], dtype=np.float64))
        np.add.at(out[e], np.minimum(conf.sum(axis=1), cap), prob)
    return out


def make_events(seed: int, n_events: int, *, mean: float, max_count: int, pad: int = 5):
    """Flat layout as the kernel sees it: events back to back, then ``pad`` padding
    objects outside every event; some events empty, some probabilities exactly 0 or 1."""
    rng = np.random.default_rng(seed)
    counts = np.minimum(rng.poisson(mean, n_events), max_count).astype(np.int32)
    counts[0] = 0
    counts[-1] = 0
    starts = (np.cumsum(counts) - counts).astype(np.int32)
    total = int(counts.sum())
    p = np.zeros(total + pad)
    p[:total] = rng.uniform(size=total)
    k = min(total, 8)
    p[:k] = rng.choice([0.0, 1.0, 1.0 - 1e-12, 1e-12, 0.5], size=k)
    p[total:] = rng.uniform(size=pad)  # ignored: outside every event
    return jnp.asarray(p), jnp.asarray(starts), jnp.asarray(counts)


def assert_close(actual, expected, rtol=RTOL):
    """Relative to the largest entry: entries that cancel to ~0 are compared absolutely."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    scale = max(np.abs(expected).max(), 1e-300)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


# (seed, events, mean objects, max_count, cap): caps below, at and above typical counts.
CASES = [(0, 30, 3.0, 8, 4), (2, 20, 2.0, 8, 1), (3, 16, 9.0, 16, 8)]


@pytest.fixture(params=CASES, ids=lambda c: f"seed{c[0]}-cap{c[4]}")
def events(request):
    seed, n_events, mean, max_count, cap = request.param
    p, starts, counts = make_events(seed, n_events, mean=mean, max_count=max_count)
    return p, starts, counts, cap, max_count


def test_values_against_enumeration(events):
    p, starts, counts, cap, max_count = events
    exact = enumerate_distribution(np.asarray(p), np.asarray(starts), np.asarray(counts), cap)
    assert_close(pbinom.count_distribution(p, starts, counts, cap, max_count), exact, 1e-13)
    # Events without objects: K = 0 with certainty.
    empty = np.asarray(counts) == 0
    np.testing.assert_array_equal(
        np.asarray(pbinom.count_distribution(p, starts, counts, cap, max_count))[empty][:, 0], 1.0
    )


def test_tail_weights_match_prob_count_at_least(events):
    p, starts, counts, cap, max_count = events
    q = pbinom.count_distribution(p, starts, counts, cap, max_count)
    for n, width in [(0.0, 0.0), (1.0, 0.0), (1.3, 0.0), (1.7, 0.0), (2.5, 0.3), (cap, 1.0)]:
        n, width = jnp.asarray(float(n)), jnp.asarray(width)
        expected = pbinom.prob_count_at_least(q, n, width)
        assert_close(q @ pbinom.tail_weights(n, width, cap), expected, 1e-14)
        assert_close(pbinom.prob_count_at_least(q, n, width), expected, 0)


@pytest.mark.slow
def test_distribution_jacobian_against_old_recursion(events):
    p, starts, counts, cap, max_count = events
    ref = jax.jacfwd(reference_recursion)(p, starts, counts, cap, max_count)
    for jac in (jax.jacfwd, jax.jacrev):
        fn = jax.jit(jac(pbinom.count_distribution), static_argnums=(3, 4))
        assert_close(fn(p, starts, counts, cap, max_count), ref)
    # Objects outside every event have no influence.
    assert not np.any(np.asarray(ref)[..., int(np.asarray(counts).sum()) :])


def test_jacobian_against_finite_differences():
    # Interior probabilities only: central differences need p +- h inside [0, 1].
    p, starts, counts = make_events(7, 12, mean=4.0, max_count=8, pad=2)
    p = jnp.clip(p, 0.05, 0.95)
    cap, max_count = 3, 8

    def f(p):
        return pbinom.count_distribution(p, starts, counts, cap, max_count).ravel()

    jac = np.asarray(jax.jit(jax.jacfwd(f))(p))
    step = 1e-6
    shifts = step * jnp.eye(p.shape[0])
    fd = (jax.jit(jax.vmap(f))(p + shifts) - jax.jit(jax.vmap(f))(p - shifts)).T / (2 * step)
    # The count distribution is multilinear in p: central differences are exact up
    # to rounding (~1e-16 / step).
    np.testing.assert_allclose(jac, fd, rtol=0, atol=1e-8)


@pytest.mark.slow
def test_hessian_against_old_recursion():
    p, starts, counts = make_events(5, 15, mean=4.0, max_count=8, pad=3)
    cap, max_count = 4, 8
    g = jnp.asarray(np.random.default_rng(0).normal(size=(15, cap + 1)))

    def ref_q(p):
        return jnp.sum(reference_recursion(p, starts, counts, cap, max_count) * g)

    def new_q(p):
        return jnp.sum(pbinom.count_distribution(p, starts, counts, cap, max_count) * g)

    ref = jax.jit(jax.jacfwd(jax.jacfwd(ref_q)))(p)
    assert np.abs(np.asarray(ref)).max() > 0.1  # a Hessian that is not trivially zero
    assert_close(jax.jit(jax.jacfwd(jax.jacfwd(new_q)))(p), ref)
    assert_close(jax.jit(jax.hessian(new_q))(p), ref)


def test_parameter_chain_under_jit():
    """As the kernel uses it: p from soft cuts on a parameter, P(K >= n) with n a
    parameter, jit(jacfwd) over both; against the old recursion."""
    rng = np.random.default_rng(3)
    counts = jnp.asarray(rng.poisson(5.0, 64).clip(0, 16).astype(np.int32))
    starts = jnp.cumsum(counts) - counts
    pt = jnp.asarray(rng.exponential(40.0, int(counts.sum()) + 4) + 15.0)
    cap, max_count = 5, 16

    def make(count):
        def f(theta):
            p = jax.nn.sigmoid((pt - theta[0]) / 5.0)
            c = pbinom.tail_weights(theta[1], jnp.asarray(0.5), cap)[None, :]
            return count(p, c)[:, 0]

        return f

    def ref_count(p, c):
        return reference_recursion(p, starts, counts, cap, max_count) @ c.T

    def new_count(p, c):
        return pbinom.count_distribution(p, starts, counts, cap, max_count) @ c.T

    theta = jnp.asarray([30.0, 2.3])
    for fn in (jax.jacfwd, lambda f: jax.jacfwd(jax.jacfwd(f))):
        assert_close(jax.jit(fn(make(new_count)))(theta), jax.jit(fn(make(ref_count)))(theta))


def test_padding_events_anywhere_keep_each_object_in_its_event():
    """Empty padding events placed with ``start = 0`` after the real ones (as
    ``analysis.soft.count_at_least`` pads to size buckets) must not shift objects into
    other events: the custom rule's Jacobian equals the plain recursion's."""
    p, starts, counts = make_events(11, 12, mean=3.0, max_count=6)
    starts = jnp.concatenate([starts, jnp.zeros(4, starts.dtype)])
    counts = jnp.concatenate([counts, jnp.zeros(4, counts.dtype)])
    cap, max_count = 4, 8
    assert_close(
        jax.jacfwd(lambda q: pbinom.count_distribution(q, starts, counts, cap, max_count))(p),
        jax.jacfwd(lambda q: reference_recursion(q, starts, counts, cap, max_count))(p),
    )
