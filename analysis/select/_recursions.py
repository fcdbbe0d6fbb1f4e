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
import numpy as np

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


# --- the walk: one object at a time, a count state in one of two forms -----------------
#
# A count state (a distribution F or a value function G over the S joint states) is a
# table ``(..., S)`` (the engine's walks: any model) or a tuple of S arrays ``(...)``, each
# state its own vector (:func:`dense_weights`: one set, few states). The walk is written
# once for both; only the moves (:func:`_shift`, :func:`_pull`) and the sums over states
# (:func:`_mix`, :func:`_dot`) look at the form. A small table costs slices and
# concatenations per object, many times the arithmetic under jacfwd (measured on one set:
# 200 -> 20 ms per 10k events); a vector per state costs the arithmetic alone, at a
# program that grows with S x P. The two forms agree to rounding, not bit for bit (XLA
# fuses the products and sums of the two differently, FMA included: a 1-ulp difference
# at some caps), so the engine keeps the table: its states stay the same bits.


def _total(terms):
    """Sum of ``terms`` in order, ``None`` (a structural zero) left out; ``None`` if all
    are: ``x + 0`` is ``x``, so skipping the table's zeros keeps its numbers."""
    out = None
    for t in terms:
        if t is not None:
            out = t if out is None else out + t
    return out


def _moved_states(y, d, shape, pull: bool):
    """:func:`_shift` (``pull`` False) or :func:`_pull` of a per-state tuple ``y``: the
    table's moves axis by axis, a zero as ``None``, a tail as the same ordered sum."""
    y = list(y)
    for v, dv in enumerate(d):
        if dv == 0:
            continue
        n_v, cap = shape[v], shape[v] - 1
        stride = math.prod(shape[v + 1:])
        keep = max(cap - int(dv), 0)
        new = []
        for s in range(len(y)):
            k = (s // stride) % n_v
            at = s - k * stride  # the state with k_v = 0
            if pull:
                new.append(y[at + min(k + int(dv), cap) * stride])
            elif k < cap - keep:
                new.append(None)
            elif k < cap:
                new.append(y[at + (k - cap + keep) * stride])
            else:
                new.append(_total(y[at + i * stride] for i in range(keep, cap + 1)))
        y = new
    return tuple(y)


def _pattern(pi_m, p: int):
    """Pattern ``p``'s probabilities of one object: ``pi_m`` is ``(..., P)`` or a tuple of
    ``P`` arrays (the per-state walk's own layout: each pattern contiguous)."""
    return pi_m[p] if isinstance(pi_m, tuple) else pi_m[..., p]


def _by_object(pi, axis: int):
    """``pi`` (an array ``(..., M, P)`` or a tuple of ``P`` arrays ``(..., M)``) with the
    objects' axis first: what the walk's scans run over."""
    if isinstance(pi, tuple):
        return tuple(jnp.moveaxis(x, axis, 0) for x in pi)
    return jnp.moveaxis(pi, axis, 0)


def _mix(pi_m, moved):
    """``sum_p pi_m[..., p] moved[p]``: one object's step from the state moved by each
    pattern (``pi_m``: see :func:`_pattern`)."""
    if isinstance(moved[0], tuple):
        return tuple(
            _total(None if m[s] is None else _pattern(pi_m, p) * m[s]
                   for p, m in enumerate(moved))
            for s in range(len(moved[0]))
        )
    return sum(pi_m[..., p, None] * m for p, m in enumerate(moved))


def _dot(f, g):
    """``sum_k f(k) g(k)`` over the states (per state: ``f(0) g(0) + f(1) g(1) + ...``;
    stacking the states into the table's reduce instead costs jacfwd 140 -> 190 ms per
    50k events of one set)."""
    if isinstance(f, tuple):
        return _total(a * b for a, b in zip(f, g, strict=True))
    return jnp.sum(f * g, axis=-1)


def _advance(x, pi_m, d, shape, *, pull: bool):
    """One object on ``x``: the distribution's step (``pull`` False, :func:`_shift`) or
    the value function's (``pull`` True, :func:`_pull`), either form."""
    move = _pull if pull else _shift
    return _mix(pi_m, [move(x, d[p], shape) for p in range(len(d))])


def _backward(G, pi, d, shape):
    """Value function through one collection: ``G <- sum_p pi_p G[..., tgt_p]`` for each
    object, last object first. ``G``: ``(E, ..., S)`` (or per state); ``pi``:
    ``(E, ..., M, P)``."""

    # Elementwise products and slices, not einsum or gathers: their jacfwd (batched
    # tiny matmuls, batched gathers) is many times slower on CPU.
    def step(g, pi_m):
        return _advance(g, pi_m, d, shape, pull=True), None

    xs = _by_object(pi, -1 if isinstance(pi, tuple) else -2)
    g, _ = jax.lax.scan(step, G, xs, reverse=True)
    return g


def _shift(x, d, shape):
    """Distribution ``x`` ``(..., S)`` after adding ``d`` ``(V,)`` to every count, mass
    beyond a cap absorbed into the cap: per axis ``[0]*d, x[:cap-d], sum(x[cap-d:])``."""
    if isinstance(x, tuple):
        return _moved_states(x, d, shape, pull=False)
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
    if isinstance(g, tuple):
        return _moved_states(g, d, shape, pull=True)
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
    each object (per state: a tuple of ``(M, E)``)."""

    def step(f, pi_m):
        return _advance(f, pi_m, d, shape, pull=False), f

    return jax.lax.scan(step, F, _by_object(pi, 1))


def _weights_backward(G, pi, before, d, shape, patterns=None):
    """The value function through one collection with each object's pattern weights:
    ``(G_0, wp)``, ``wp`` ``(M, E, P)`` (objects first) = ``pi_jp sum_k F_j(k)
    G_{j+1}(tgt_p(k))`` (``before``: :func:`_forward`'s stack of the ``F_j``);
    ``patterns``: only these (static), ``wp`` ``(M, E, len(patterns))``."""
    want = range(len(d)) if patterns is None else patterns

    def step(g, xs):
        pi_m, f_m = xs
        # value after this object given its pattern p, and h_p = sum_k F(k) G(tgt_p(k))
        gt = [_pull(g, d[p], shape) for p in range(len(d))]
        h = jnp.stack([_dot(f_m, gt[p]) for p in want], axis=-1)
        g = _mix(pi_m, gt)  # before the weights: the engine's order of operations, its bits
        w = pi_m * h if patterns is None else jnp.stack([_pattern(pi_m, p) for p in want], -1) * h
        return g, w

    G, wp = jax.lax.scan(step, G, (_by_object(pi, 1), before), reverse=True)
    return G, wp


def _ends(f, e: int, states: bool):
    """The walk's two ends for ``e`` events: ``F`` = all counts 0 and ``G`` = the pass
    table ``f``, as tables ``(e, S)`` or (``states``) one ``(e,)`` vector per state."""
    n = f.shape[0]
    if states:
        F = tuple(jnp.full((e,), 1.0 if k == 0 else 0.0, jnp.float64) for k in range(n))
        return F, tuple(jnp.broadcast_to(f[k], (e,)) for k in range(n))
    return jnp.zeros((e, n), dtype=jnp.float64).at[:, 0].set(1.0), jnp.broadcast_to(f, (e, n))


# --- one set, one count, flat lists: the walk in event blocks ----------------------------

#: Target ``M * S * block`` (values of one block's forward distributions: 512 KiB in
#: float64, about a level-2 cache).
BLOCK_VALUES = 1 << 16


def event_block(n_events: int, cells: int) -> int:
    """Events per block for ``cells = M * S``: a power of two near
    :data:`BLOCK_VALUES` / ``cells``, between 256 and 4096, and no larger than
    ``n_events`` rounded up to a power of two (small chunks are one block)."""
    target = max(1, BLOCK_VALUES // max(cells, 1))
    block = 1 << (target.bit_length() - 1)
    block = min(max(block, 256), 4096)
    return max(1, min(block, 1 << max(n_events - 1, 0).bit_length()))


def dense_weights(values, offsets, event, f, *, max_objects: int):
    """``(objects (N,), events (E,))`` of one object set with the pass table ``f``
    ``(S,)`` (the count states ``0 .. S - 1``, the top one absorbing), without the NaN
    of a threshold above its cap: :func:`_forward` and :func:`_weights_backward` (the
    walk of :func:`analysis.select.objects.object_weights` on a one-set model, per
    state) over blocks of :func:`event_block` events.

    ``values``: ``(N,)`` pass probabilities; ``offsets``: ``(E + 1,)`` list boundaries,
    at most ``max_objects`` per list; ``event``: ``(N,)`` the list of each element, ``E``
    beyond ``offsets[-1]``. Elements beyond ``offsets[-1]`` (padding) get weight 0; so
    do the empty slots of each block's table (``q = 0``: they never pass, the engine's
    pattern 0), and the events that pad the last block (no objects).

    The blocks keep the forward distributions that the backward scan reads,
    ``(M, S, block)``, in the processor's cache: one small buffer reused by every
    block instead of an ``(M, S, events)`` array written and read once per chunk
    (measured on 50k-event chunks of generated ttbar, 20 slots, 3 states: under
    ``jax.jacfwd`` 62 -> 21 ms of CPU time, and no longer 24k page faults per call).
    """
    n_events, n_values, m_slots = offsets.shape[0] - 1, values.shape[0], max_objects
    n_states = f.shape[0]
    d, shape = np.array([[0], [1]]), (n_states,)  # patterns: out of the set, in it
    block = event_block(n_events, m_slots * n_states)
    n_blocks = max(1, -(-n_events // block))
    starts = offsets[:-1]
    counts = offsets[1:] - starts
    pad = n_blocks * block - n_events
    starts_b = jnp.concatenate([starts, jnp.zeros(pad, starts.dtype)]).reshape(n_blocks, block)
    counts_b = jnp.concatenate([counts, jnp.zeros(pad, counts.dtype)]).reshape(n_blocks, block)
    pos = jnp.arange(m_slots, dtype=starts.dtype)[:, None]

    def one_block(_, x):
        st, ct = x
        valid = pos < ct[None, :]
        q = jnp.where(valid, values[jnp.where(valid, st[None, :] + pos, 0)], 0.0)  # (M, block)
        pi = ((1.0 - q).T, q.T)  # _pattern_probs' values, pattern by pattern (the scans undo .T)
        F, G = _ends(f, block, True)
        _, before = _forward(F, pi, d, shape)
        g, wp = _weights_backward(G, pi, before, d, shape, patterns=(1,))  # 1: in the set
        return None, (wp[..., 0], g[0])  # (M, block), (block,)

    _, (dense, passed) = jax.lax.scan(one_block, None, (starts_b, counts_b))
    # every element's place (block, slot, event in block) in the blocks' dense tables;
    # padding: one zero slot at the end
    within = jnp.minimum(event, max(n_events - 1, 0))
    slot = jnp.arange(n_values) - starts[within]
    flat_index = jnp.where(
        event < n_events,
        (within // block) * (m_slots * block) + slot * block + within % block,
        n_blocks * m_slots * block,
    )
    events = passed.reshape(-1)[:n_events]
    table = jnp.concatenate([dense.reshape(-1), jnp.zeros((1,), dense.dtype)])
    return table[flat_index], events


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
