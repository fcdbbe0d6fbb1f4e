"""The recursions of :mod:`analysis.select.objects` (pure JAX): pattern probabilities,
the pass table, backward (value-function) and forward (distribution) steps over the
joint count states. Internal: the public functions live in :mod:`analysis.select.objects`
and :mod:`analysis.select.leading`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp

from analysis.limits import check_bytes
from analysis.select.countmodel import CountModel
from analysis.select.pbinom import at_least

__all__: list[str] = []  # internal: see analysis.select.objects


# --- pattern probabilities and the pass table ------------------------------------------


#: ``probs[FACTOR + name]`` (optional, ``(E, M)``): a per-object factor on the patterns
#: holding set ``name``. The recursions are linear in the pattern weights, so every
#: result becomes the exact expectation of the hard-cut state weighted by ``prod_{j in
#: name} factor_j`` (a per-object scale factor's event weight).
FACTOR = "factor:"


def _pattern_probs(model: CountModel, probs: Mapping[str, jnp.ndarray], layouts, c: str):
    """``(E, M, P)`` pattern probabilities of collection ``c`` (padding: pattern 0),
    times the :data:`FACTOR` of each set a pattern holds."""
    sets = model._sets_of[c]
    pats = model.patterns[c]
    valid = layouts[c].valid
    q = [jnp.asarray(probs[s.name]) for s in sets]
    factor = [probs.get(FACTOR + s.name) for s in sets]
    idx = {s.name: i for i, s in enumerate(sets)}
    cols = []
    for row in pats:
        pi = jnp.ones(valid.shape, dtype=jnp.float64)
        for i, s in enumerate(sets):
            reachable = s.parent is None or row[idx[s.parent]]
            if row[i]:
                pi = pi * q[i] if factor[i] is None else pi * q[i] * factor[i]
            elif reachable:
                pi = pi * (1.0 - q[i])
        cols.append(pi)
    pi = jnp.stack(cols, axis=-1)
    empty = jnp.zeros(len(pats), dtype=pi.dtype).at[0].set(1.0)
    return jnp.where(valid[..., None], pi, empty)


def _pass_table(model: CountModel, thresholds, widths=None):
    """``(f, ok)``: ``f`` ``(S,)`` = product of the (smoothed) count indicators in each
    state; ``ok`` = every threshold within its cap (else results are NaN).

    The indicator of ``K op n`` is built from :func:`_at_least` as the single-collection
    form's soft ``>= N`` (:func:`analysis.select.pbinom.tail_weights`): ``>= n``; ``> n`` is
    ``>= n + 1``; ``< n`` is ``1 - [>= n]``; ``<= n`` is ``1 - [>= n + 1]``; ``== n`` is
    ``[>= n] - [>= n + 1]``. ``widths``: ``(n_counts,)`` step widths (``None``: 0), so a
    trainable ``n`` has the gradient ``-s'(frac n) P(K = floor n ...)``; at integer ``n``
    every indicator is the hard one."""
    thresholds = jnp.asarray(thresholds, dtype=jnp.float64).reshape(len(model.counts))
    if widths is None:
        widths = jnp.zeros(len(model.counts), dtype=jnp.float64)
    widths = jnp.asarray(widths, dtype=jnp.float64).reshape(len(model.counts))
    f = jnp.ones(model.n_states, dtype=jnp.float64)
    ok = jnp.asarray(True)
    var_of = {names: v for v, (names, _) in enumerate(model.variables)}
    for j, c in enumerate(model.counts):
        v = var_of[tuple(sorted(c.sets))]
        cap = model.variables[v][1]
        k = jnp.asarray(model._state_counts[:, v], dtype=jnp.float64)
        n, w = thresholds[j], widths[j]
        if c.op == ">=":
            ind = at_least(k, n, w)
        elif c.op == ">":
            ind = at_least(k, n + 1.0, w)
        elif c.op == "<":
            ind = 1.0 - at_least(k, n, w)
        elif c.op == "<=":
            ind = 1.0 - at_least(k, n + 1.0, w)
        else:
            ind = at_least(k, n, w) - at_least(k, n + 1.0, w)
        f = f * ind
        # The top state means K >= cap: exact while no indicator looks above it.
        ok = ok & ((n <= cap) if c.op in (">=", "<") else (n + 1.0 <= cap))
    return f, ok


def _nan_where(bad, x):
    """``x`` with NaN where ``bad`` (broadcast over trailing axes); gradient 0 there."""
    bad = jnp.reshape(bad, bad.shape + (1,) * (x.ndim - bad.ndim))
    return jnp.where(bad, jnp.nan, x)


def _backward(G, pi, d, shape):
    """Value function through one collection: ``G <- sum_p pi_p G[..., tgt_p]`` for each
    object, last object first. ``G``: ``(E, ..., S)``; ``pi``: ``(E, ..., M, P)``."""

    # Elementwise products and slices, not einsum or gathers: their jacfwd (batched
    # tiny matmuls, batched gathers) is many times slower on CPU.
    def step(g, pi_m):
        return sum(pi_m[..., p, None] * _pull(g, d[p], shape) for p in range(len(d))), None

    xs = jnp.moveaxis(pi, -2, 0)
    g, _ = jax.lax.scan(step, G, xs, reverse=True)
    return g


def _shift(x, d, shape):
    """Distribution ``x`` ``(..., S)`` after adding ``d`` ``(V,)`` to every count, mass
    beyond a cap absorbed into the cap: per axis ``[0]*d, x[:cap-d], sum(x[cap-d:])``."""
    lead = x.shape[:-1]
    y = x.reshape(lead + shape)
    for v, dv in enumerate(d):
        if dv == 0:
            continue
        cap = shape[v] - 1
        axis = len(lead) + v
        keep = max(cap - int(dv), 0)
        zeros = jnp.zeros(y.shape[:axis] + (cap - keep,) + y.shape[axis + 1 :], y.dtype)
        head = jax.lax.slice_in_dim(y, 0, keep, axis=axis)
        tail = jnp.sum(jax.lax.slice_in_dim(y, keep, cap + 1, axis=axis), axis=axis, keepdims=True)
        y = jnp.concatenate([zeros, head, tail], axis=axis)
    return y.reshape(lead + (math.prod(shape),))


def _pull(g, d, shape):
    """Value ``g`` ``(..., S)`` read at the states after adding ``d`` (``G(min(k + d,
    cap))``): per axis ``g[d:cap+1]`` then ``g[cap]`` repeated (slices, no gather, so
    that jacfwd stays cheap)."""
    lead = g.shape[:-1]
    y = g.reshape(lead + shape)
    for v, dv in enumerate(d):
        if dv == 0:
            continue
        cap = shape[v] - 1
        axis = len(lead) + v
        start = min(int(dv), cap)
        head = jax.lax.slice_in_dim(y, start, cap + 1, axis=axis)
        top = jax.lax.slice_in_dim(y, cap, cap + 1, axis=axis)
        reps = y.shape[:axis] + (start,) + y.shape[axis + 1 :]
        y = jnp.concatenate([head, jnp.broadcast_to(top, reps)], axis=axis)
    return y.reshape(lead + (math.prod(shape),))


def _forward(F, pi, d, shape):
    """Forward distribution through one collection (``d``: ``(P, V)`` increments);
    returns the final ``F`` and the ``(M, E, S)`` stack of distributions *before*
    each object."""

    def step(f, pi_m):
        return sum(pi_m[:, p, None] * _shift(f, d[p], shape) for p in range(len(d))), f

    return jax.lax.scan(step, F, jnp.moveaxis(pi, 1, 0))


def _prepare(model, probs, layouts, thresholds, count_widths=None):
    # The recursions hold (events, states) tables: a cap of 1e9 is one line here, not an
    # allocator's failure (or the out-of-memory killer) later.
    e = next(iter(probs.values())).shape[0] if probs else 1
    check_bytes("CountModel: count caps", 8.0 * e * model.n_states,
                f"{model.n_states} joint count states x {e} events")
    pis = {c: _pattern_probs(model, probs, layouts, c) for c in model.collections}
    f, ok = _pass_table(model, thresholds, count_widths)
    e = next(iter(pis.values())).shape[0]
    bad = ~ok
    for c in model.collections:
        bad = bad | layouts[c].overflow
    bad = jnp.broadcast_to(bad, (e,))
    return pis, f, bad
