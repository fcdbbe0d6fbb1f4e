"""Object sets, joint soft counts, per-object weights and leading objects (pure JAX).

Pure maths beside :mod:`analysis.stats`: arrays in, arrays out; no files, no coffea.
Everything is float64 (importing :mod:`analysis` enables x64).

Semantics: every quantity is the **exact expectation of the hard-cut state** when each
object passes each set's own cuts independently, with probability ``q`` = the product of
that set's cut sigmoids (:func:`soft_pass`, width 0 = hard step). A derived set
(``bjets`` from ``jets``) holds an object only if its parent holds it too:
``P(j in bjets) = q_jets(j) * q_bjets(j)``. With all widths 0 every probability is 0 or
1 and every result equals the plain hard-cut computation.

Layout. A collection (``Jet``) arrives as flat jagged columns (values of all objects,
per-event ``starts`` and ``counts``, as :mod:`analysis.pipeline.backends.jax.passes` uses); :func:`layout`
turns them into a :class:`Layout` of dense ``(events, M)`` indices, ``M =
max_objects``. Dense per-object arrays are ``(events, M)``; entries beyond an event's
count are padding and are ignored.

Object state. Within one collection an object's *pattern* is the set of object sets
holding it (closed under parents: jets only; jets and bjets; none). Its probability is
``pi_p = prod_{s in p} q_s * prod_{s not in p, parent(s) in p or root} (1 - q_s)``.

Joint counts. A :class:`Count` counts the members of one or several sets (a b-jet
counts once in ``jets`` and once in ``bjets``; ``count: [muons, electrons]`` adds the
two collections). Counts over the same sets share one count *variable* ``K_v``; the
joint distribution of all variables is the multi-dimensional Poisson-binomial over the
objects' patterns (never a product of marginals): one object moves the state ``k`` to
``min(k + d(p), cap)`` with probability ``pi_p``, ``d_v(p)`` = number of sets of ``p``
counted by ``v``. The top state ``cap_v`` of a variable is absorbing (``K_v >=
cap_v``), which is exact as long as every condition on ``K_v`` is constant for all
``k >= cap_v``: ``K >= n`` and ``K < n`` need ``n <= cap``; ``K > n``, ``K <= n``,
``K == n`` need ``n + 1 <= cap`` (:func:`required_cap`). A threshold beyond its count's
cap makes every result NaN (with zero gradient): never a silent bias.

Count thresholds are real and trainable: ``K op n`` is the blended decision ``(1 - s)
[K op floor n] + s [K op floor n + 1]``, ``s = integer_step(n - floor n, width)``
(:func:`analysis.select.pbinom.integer_step`; the tail weight :func:`analysis.select.pbinom.at_least`),
and every result is its exact expectation; integer ``n`` (or width 0 and a rounded
``n``) is the hard condition. ``d/dn`` is ``s'`` times the probability of the states
where the two integer conditions differ; at integer ``n`` it is the right derivative.

The event pass probability is ``P = sum_k Q(k) f(k)``, ``f(k) = prod_c [k_{v(c)} op_c
n_c]``, computed by the backward (value-function) recursion ``G <- sum_p pi_p
G[tgt_p]`` from ``G = f`` over all objects, then ``P = G[0]``: only sums of
non-negative products, exact and stable at ``q`` in {0, 1}.

Cost per event (``S = prod_v (cap_v + 1)`` states, ``P`` patterns per collection,
``N`` objects over all collections): :func:`event_pass` ``O(N P S)``;
:func:`object_weights` ``O(N P S)`` (a forward and a backward pass) and ``N S``
stored states; :func:`sum_moments` ``O(N P S r^2)`` to order ``r``; :func:`leading`
with ``T`` candidate tuples (``C(M, r + 1)`` for a set indexed up to ``[r]``; ``M``
only the objects that can be in the set where ``possible`` gives it): one
indexed set (``jets[0] + jets[1] + jets[2]``) ``O((sum_{j<r} C(M, j) + M) M P S_c +
C(M, r - 1) M^2 S_c)`` by a walk in rank order (:func:`_leading_ranked`; ``S_c``: the
states of the count variables its collection touches), several sets (``muons[0] +
bjets[0]``) at most ``O(T N_c P S)`` with ``N_c`` objects of their collections (two
sets on two collections: the walk once per candidate of the smaller one); ``T`` is
bounded by ``max_tuples`` (:class:`ObjectCapError`). Caps: ``max_objects`` per
collection and event (:func:`check_counts` raises :class:`ObjectCapError` on the
host, naming file and entry; inside a traced function an event beyond the layout's
width gets NaN results), ``cap`` per count (from the threshold or its upper bound).

Where the pieces live (all importable from here): the model (:class:`ObjectSet`,
:class:`Count`, :class:`CountModel`) in :mod:`analysis.select.countmodel`, the dense
views (:class:`Layout`) in :mod:`analysis.select.objlayout`, the recursions in
:mod:`analysis.select._recursions`, :func:`leading` in :mod:`analysis.select.leading`;
this module: the soft cut and the public expectations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from analysis.select._recursions import (  # noqa: F401  (re-exported: one import path)
    FACTOR,
    _backward,
    _ends,
    _forward,
    _nan_where,
    _pass_table,
    _pattern_probs,
    _prepare,
    _pull,
    _shift,
    _weights_backward,
)
from analysis.select.countmodel import OPS, Count, CountModel, ObjectSet, required_cap
from analysis.select.leading import leading
from analysis.select.objlayout import Layout, ObjectCapError, check_counts, layout, take

__all__ = [
    "FACTOR",
    "OPS",
    "Count",
    "CountModel",
    "Layout",
    "ObjectCapError",
    "ObjectSet",
    "check_counts",
    "event_pass",
    "joint_distribution",
    "layout",
    "leading",
    "membership",
    "object_weights",
    "required_cap",
    "soft_pass",
    "sum_moments",
    "take",
]

# --- cuts ------------------------------------------------------------------------------


def soft_pass(value, threshold, width, *, greater: bool, inclusive: bool):
    """``P(value > threshold)`` (``greater``) or ``P(value < threshold)``, smoothed:
    ``sigmoid(z / width)`` with ``z = value - threshold`` (or ``threshold - value``);
    ``width == 0`` is the hard step ``z > 0`` (``z >= 0`` if ``inclusive``) with zero
    gradient. The one soft cut of both kernels (:mod:`analysis.pipeline.backends.jax.passes` re-exports it);
    float64, any shape."""
    z = value - threshold if greater else threshold - value
    soft = width > 0
    s = jax.nn.sigmoid(z / jnp.where(soft, width, 1.0))
    hard = (z >= 0) if inclusive else (z > 0)
    return jnp.where(soft, s, hard.astype(z.dtype))



# --- public functions ------------------------------------------------------------------


@partial(jax.jit, static_argnames=("model",))
def membership(probs: Mapping[str, jnp.ndarray], layouts: Mapping[str, Layout], model):
    """``P(object in set)`` per set, ``(E, M)``: the product of the own probabilities
    along the parent chain (0 at padding, NaN for overflow events)."""
    out = {}
    for s in model.sets:
        c, i = model.set_index(s.name)
        pi = _pattern_probs(model, probs, layouts, c)
        has = jnp.asarray(model.patterns[c][:, i], dtype=jnp.float64)
        out[s.name] = _nan_where(layouts[c].overflow, pi @ has)
    return out


@partial(jax.jit, static_argnames=("model",))
def joint_distribution(probs, layouts, model: CountModel):
    """Joint distribution of the count variables, ``(E, cap_1 + 1, ..., cap_V + 1)``
    (top index of each axis = ``K_v >= cap_v``); sums to 1 per event. ``probs``: set
    name -> own pass probability ``(E, M)`` of its collection; ``layouts``: collection
    -> :class:`Layout`. O(N P S) per event."""
    pis = {c: _pattern_probs(model, probs, layouts, c) for c in model.collections}
    e = next(iter(pis.values())).shape[0]
    F = jnp.zeros((e, model.n_states), dtype=jnp.float64).at[:, 0].set(1.0)
    bad = jnp.zeros((e,), dtype=bool)
    for c in model.collections:
        F, _ = _forward(F, pis[c], model.increments[c], model.shape)
        bad = bad | layouts[c].overflow
    return _nan_where(bad, F).reshape((e,) + model.shape)


@partial(jax.jit, static_argnames=("model",))
def event_pass(probs, layouts, model: CountModel, thresholds, count_widths=None):
    """``P(all count conditions hold)`` per event, ``(E,)``: the exact expectation of the
    hard-cut decision (module docstring). ``thresholds``: ``(n_counts,)`` ``n`` of each
    :class:`Count`, in order (traced; gradient 0). No counts: 1. NaN for overflow
    events and thresholds beyond a cap."""
    pis, f, bad = _prepare(model, probs, layouts, thresholds, count_widths)
    e = bad.shape[0]
    G = jnp.broadcast_to(f, (e, model.n_states))
    for c in reversed(model.collections):
        G = _backward(G, pis[c], model.increments[c], model.shape)
    return _nan_where(bad, G[:, 0])


@partial(jax.jit, static_argnames=("model",))
def object_weights(probs, layouts, model: CountModel, thresholds, count_widths=None):
    """``P(object in set and all count conditions hold)`` per set, ``(E, M)`` (0 at
    padding): conditioning on the object's own pattern ``p``, ``w_j(s) = sum_{p ∋ s}
    pi_jp sum_k F_j(k) G_{j+1}(min(k + d(p), cap))`` with ``F_j`` the joint distribution
    of the objects before ``j`` and ``G_{j+1}`` the value function of those after it
    (leave-one-out by prefix/suffix recursions, no division). Summed over the patterns
    it is :func:`event_pass` for every ``j``."""
    pis, f, bad = _prepare(model, probs, layouts, thresholds, count_widths)
    # every collection's distributions before each object, then the value function back
    F, G = _ends(f, bad.shape[0], False)
    stacks = {}
    for c in model.collections:
        F, stacks[c] = _forward(F, pis[c], model.increments[c], model.shape)
    out = {}
    for c in reversed(model.collections):
        G, wp = _weights_backward(G, pis[c], stacks[c], model.increments[c], model.shape)
        wp = jnp.moveaxis(wp, 0, 1)  # (E, M, P)
        for i, s in enumerate(model._sets_of[c]):
            has = jnp.asarray(model.patterns[c][:, i], dtype=jnp.float64)
            out[s.name] = _nan_where(bad, wp @ has)
    return out


@partial(jax.jit, static_argnames=("model", "order"))
def sum_moments(
    probs, layouts, model: CountModel, thresholds, values, count_widths=None, *, order: int = 2
):
    """``E[X^r 1{all count conditions hold}]`` for ``r = 0..order``, ``(E, order + 1)``,
    of an event-level sum over selected objects ``X = sum_s sum_{j in s} values[s]_j``
    (``values``: set name -> ``(E, M)``; e.g. HT = ``{"jets": jet_pt}``; ``{"jets": 1}``
    counts). Column 0 is :func:`event_pass`; a soft event state needs these raw
    moments (``sum_e w_e E[X^r pass]``), which per-object weights alone cannot give
    for ``r >= 2``.

    Backward recursion with binomial expansion: ``G_r(k) <- sum_p pi_p sum_{i<=r}
    C(r, i) x_p^i G_{r-i}(tgt_p(k))``, ``x_p`` = the object's contribution in pattern
    ``p``, from ``G_r = f`` if ``r = 0`` else 0. ``O(N P S order^2)`` per event.
    """
    pis, f, bad = _prepare(model, probs, layouts, thresholds, count_widths)
    e = bad.shape[0]
    S = model.n_states
    G = jnp.zeros((e, order + 1, S), dtype=jnp.float64).at[:, 0].set(f)
    binom = np.array([[math.comb(r, i) for i in range(order + 1)] for r in range(order + 1)])
    for c in reversed(model.collections):
        sets = model._sets_of[c]
        pats = model.patterns[c]
        m = layouts[c].valid.shape[1]
        x = jnp.zeros((e, m, len(pats)), dtype=jnp.float64)
        for i, s in enumerate(sets):
            if s.name in values:
                v = jnp.broadcast_to(jnp.asarray(values[s.name], dtype=jnp.float64), (e, m))
                v = jnp.where(layouts[c].valid, v, 0.0)
                x = x + v[..., None] * jnp.asarray(pats[:, i], dtype=jnp.float64)
        d = model.increments[c]

        def step(g, xs, d=d):
            pi_m, x_m = xs  # (E, P)
            new = [0.0] * (order + 1)
            for p in range(len(d)):
                gt = _pull(g, d[p], model.shape)  # (E, R, S): moments after, given p
                # a pattern of probability exactly 0 never changes a result (no 0 x inf)
                xp = jnp.where(pi_m[:, p, None] == 0, 0.0, x_m[:, p, None])
                powers = [jnp.ones_like(xp)]
                for _ in range(order):
                    powers.append(powers[-1] * xp)
                for r in range(order + 1):
                    terms = sum(binom[r, i] * powers[i] * gt[:, r - i] for i in range(r + 1))
                    new[r] = new[r] + pi_m[:, p, None] * terms
            return jnp.stack(new, axis=1), None

        xs = (jnp.moveaxis(pis[c], 1, 0), jnp.moveaxis(x, 1, 0))
        G, _ = jax.lax.scan(step, G, xs, reverse=True)
    return _nan_where(bad, G[:, :, 0])
