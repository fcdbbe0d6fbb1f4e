"""Leading objects of object sets (pure JAX): :func:`leading`, the candidate tuples of an
indexed observable (``jets[0]``, ``muons[0] + bjets[0]``) with
``P(the tuple leads its sets and the event passes)``, by a walk in rank order
(:func:`_leading_ranked`). The meaning and the cost: :mod:`analysis.select.objects`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from analysis.errors import ConfigError
from analysis.select._recursions import (
    _backward,
    _forward,
    _nan_where,
    _pattern_probs,
    _prepare,
    _pull,
    _shift,
)
from analysis.select.countmodel import CountModel
from analysis.select.objlayout import ObjectCapError

__all__ = ["MAX_TUPLES", "can_be_in", "leading", "too_many_tuples"]

#: The default bound on an indexed observable's candidate tuples per event (a
#: collection without ``max_objects``); both kernels refuse more with :func:`too_many_tuples`.
MAX_TUPLES = 4096


def too_many_tuples(slots: Sequence[tuple[str, int]], objects: Mapping[str, int],
                    n_tuples: int, max_tuples: int) -> ObjectCapError:
    """The one-line error of an indexed observable with more than ``max_tuples``
    candidate tuples per event (``objects``: per collection, the most objects of an
    event that can be in the indexed set: those certain to fail it do not count)."""
    ms = ", ".join(f"{c}: {m}" for c, m in objects.items())
    return ObjectCapError(
        f"{' + '.join(f'{n}[{r}]' for n, r in slots)}: {n_tuples} candidate tuples "
        f"per event (objects that can pass per event {ms}) exceed max_tuples={max_tuples}; "
        "add a hard pre-selection (a cut with width: 0) so that fewer objects can pass, "
        "or set max_objects on the collection to allow them"
    )


def can_be_in(probs, layouts, model: CountModel, name: str):
    """``(E, M)`` bool: the objects that can be members of set ``name``: some pattern
    holding the set has a pass probability other than exactly 0 in float64 (NaN counts;
    per-object factors included). The others (a width-0 cut failed, a sigmoid
    underflowed to 0, a factor of 0, padding) give every candidate tuple holding them
    weight exactly 0, and a probability that is 0 has derivative 0 (it is a minimum):
    :func:`leading` leaves them out of the candidates exactly. Traceable; no gradient."""
    c, i = model.set_index(name)
    return _can(_pattern_probs(model, probs, layouts, c), model.patterns[c][:, i])


def _can(pi, has):
    """:func:`can_be_in` from the pattern probabilities ``pi`` ``(E, M, P)``."""
    return ~jnp.all(pi[..., np.asarray(has, dtype=bool)] == 0.0, axis=-1)


def _order(rank, lay, can):
    """``(E, M)`` rank position -> object: the objects that can be in the set first,
    each part by descending ``rank`` (ties, NaN and padding keep their original order,
    as ``argsort(-rank, stable)``)."""
    key = jnp.where(lay.valid, jnp.asarray(rank, dtype=jnp.float64), -jnp.inf)
    order = jnp.argsort(-key, axis=1, stable=True)
    first = jnp.argsort(~jnp.take_along_axis(can, order, axis=1), axis=1, stable=True)
    return jnp.take_along_axis(order, first, axis=1)


def _step(x, pi_m, d, shape, has, *, pull: bool):
    """One object on ``x`` ``(E, ..., S)``, split by whether its pattern is in the set
    (``has``: static bools, ``(P,)``): ``(in, out)``, the step restricted to the
    patterns with and without the set, each pattern's move computed once. A forward
    distribution step (``pull=False``, :func:`_shift`) or a value-function step
    (``pull=True``, :func:`_pull`). ``pi_m``: ``(E, P)``."""
    move = _pull if pull else _shift
    bshape = (x.shape[0],) + (1,) * (x.ndim - 1)
    parts: list[list] = [[], []]
    for p in range(len(d)):
        parts[0 if has[p] else 1].append(pi_m[:, p].reshape(bshape) * move(x, d[p], shape))
    inn, out = (sum(t) if t else jnp.zeros_like(x) for t in parts)
    return inn, out


def _tuple_index(tuples: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """Row of each ``sub`` tuple in ``tuples`` (both ``(n, j)`` static int arrays)."""
    where = {tuple(int(v) for v in row): i for i, row in enumerate(tuples)}
    return np.array([where[tuple(int(v) for v in row)] for row in sub], dtype=np.int64)


def _combos(m: int, j: int) -> np.ndarray:
    rows = list(itertools.combinations(range(m), j))
    return np.array(rows, dtype=np.int64).reshape(len(rows), j)


def _leading_ranked(pis, f, model: CountModel, name: str, depth: int, order, G=None,
                    k: int | None = None):
    """Weights of every candidate ``(a_0 < ... < a_r)`` (``r = depth``, rank positions
    below ``k``, default ``M``) of one indexed set ``name``, ``(E, C(k, r + 1))``, in
    :func:`_combos` order. ``order`` puts every object that can be in the set at a rank
    position below ``k`` (:func:`_order`); those after it only enter ``R``.

    The count state does not depend on the order in which objects are added, so the
    set's collection is walked in rank order (``order``: ``(E, M)`` rank position ->
    object) and everything else is folded into one value function ``G`` first. With
    ``I_m`` / ``O_m`` the step of object ``m`` restricted to the patterns in / out of
    the set and ``A_m = I_m + O_m``,

    ``w(a) = < I_{a_{r-1}} L_{r-1}(a_0..a_{r-2}) , R_{a_{r-1}}(a_r) >``

    where ``L_j(t)`` (a ``j``-tuple ``t``) is the count distribution of rank positions
    ``< m`` (the scan position) with exactly ``t`` among them in the set, built
    forward by layers (``L_0 = O ... O delta_0``; a ``j``-tuple is created at its last
    position from its prefix, then carried by ``O``), and ``R_m(c) = O_{m+1} ... O_{c-1}
    I_c A_{c+1} ... A_{M-1} G`` (positions after ``m``, ``c`` the only member up to
    ``c``) is built backward for all ``c`` at once. Cost per event ``O((sum_{j<r}
    C(M, j) + M) M P S_c + C(M, r - 1) M^2 S_c)`` (the last term one batched product;
    ``S_c``: the states of the variables this collection touches, the others staying
    at 0 during the walk) instead of ``O(C(M, r + 1) M P S)``; all
    sums of non-negative products (exact, no division).

    ``G``: ``(E T, n_states)`` value functions of everything but this collection,
    ``T`` per event, event-major (default: computed from ``f``, ``T = 1``); the walk
    then runs once per row and returns ``(E T, C(M, r + 1))``.
    """
    c, i = model.set_index(name)
    has = model.patterns[c][:, i]
    pi = jnp.take_along_axis(pis[c], order[..., None], axis=1)  # (E, M, P) rank order
    if G is None:  # the value function of every other collection
        G = jnp.broadcast_to(f, (pi.shape[0], model.n_states))
        for c2 in reversed(model.collections):
            if c2 != c:
                G = _backward(G, pis[c2], model.increments[c2], model.shape)
    if G.shape[0] != pi.shape[0]:  # (E T, S): T value functions per event
        pi = jnp.repeat(pi, G.shape[0] // pi.shape[0], axis=0)
    e, m = pi.shape[:2]
    k = m if k is None else min(k, m)
    # The walk starts from no object, and this collection leaves the count variables it
    # does not touch at 0: only G's slab at 0 on those axes is ever read.
    d_all = model.increments[c]
    touched = [v for v in range(len(model.shape)) if np.any(d_all[:, v])]
    G = G.reshape((e,) + model.shape)[
        (slice(None),) + tuple(slice(None) if v in touched else 0 for v in range(len(model.shape)))
    ]
    shape = tuple(model.shape[v] for v in touched)
    d = d_all[:, touched]
    S = math.prod(shape)
    G = G.reshape(e, S)
    steps = (jnp.moveaxis(pi, 1, 0), jnp.arange(m))
    cidx = jnp.arange(m)[None, :, None]

    def back(carry, xs):
        B, R = carry  # B: value of positions > m (all free); R[c]: R_m(c)
        pi_m, pos = xs
        # R needs only the out-part (XLA drops the unused in-part); B needs both: the
        # in-part starts R_m(m), their sum carries B.
        _, kept = _step(R, pi_m, d, shape, has, pull=True)
        made, b_out = _step(B, pi_m, d, shape, has, pull=True)
        R_new = jnp.where(cidx > pos, kept, jnp.where(cidx == pos, made[:, None, :], 0.0))
        return (made + b_out, R_new), R

    init = (G, jnp.zeros((e, m, S), dtype=jnp.float64))
    (_, R_first), R_after = jax.lax.scan(back, init, steps, reverse=True)
    R = jnp.concatenate([R_first[None], R_after], axis=0)  # [m + 1] = R_m, (M+1, E, M, S)
    cands = _combos(k, depth + 1)
    if not len(cands):
        return jnp.zeros((e, 0), dtype=jnp.float64)
    if depth == 0:
        return R[0][:, cands[:, 0], 0]
    layers = [_combos(k, j) for j in range(depth)]
    last = [np.full(1, -1)] + [t[:, -1] for t in layers[1:]]
    prefix = [None] + [_tuple_index(layers[j - 1], t[:, :-1]) for j, t in enumerate(layers)
                       if j > 0]

    def fwd(Ls, xs):
        pi_m, pos = xs
        split = [_step(L, pi_m, d, shape, has, pull=False) for L in Ls]  # (in, out)
        new = [split[0][1]]
        for j in range(1, depth):
            made = jnp.take(split[j - 1][0], prefix[j], axis=1)  # the prefix, then m in
            lj = jnp.asarray(last[j])[None, :, None]
            new.append(jnp.where(lj < pos, split[j][1], jnp.where(lj == pos, made, 0.0)))
        return new, split[-1][0]

    L0 = [jnp.zeros((e, 1, S), dtype=jnp.float64).at[:, :, 0].set(1.0)]
    L0 += [jnp.zeros((e, len(t), S), dtype=jnp.float64) for t in layers[1:]]
    _, emits = jax.lax.scan(fwd, L0, steps)  # (M, E, C(M, r - 1), S)
    # Contract over the states per last-prefix position m first, then pick the
    # candidates: an (M, E, C(M, r - 1), M) array instead of a (T, E, S) one.
    dots = jnp.einsum("meps,mecs->mepc", emits, R[1:])
    a_prev = cands[:, depth - 1]
    pfx = _tuple_index(layers[depth - 1], cands[:, : depth - 1])
    return dots[a_prev, :, pfx, cands[:, depth]].T


def _constrained(G, pi, d, shape, cons_c):
    """Backward through one collection (``pi``: ``(E, M, P)``) with, per object, the
    patterns each candidate allows (in the set if it is a member, out of it if ranked
    above the last member), built per step: never an ``(E, T, M, P)`` array.
    ``G``: ``(E, T, S)``; ``cons_c``: ``(object -> rank position (E, M), candidate rank
    positions (T, r + 1), patterns holding the set (P,))`` of each indexed set on it."""

    def step(g, xs):
        pi_m, pos_m = xs
        allowed = pi_m[:, None, :]
        for (_, r, has), pm in zip(cons_c, pos_m):
            inside = jnp.any(pm[:, None, None] == r[None], axis=-1)  # (E, T)
            above = pm[:, None] < r[None, :, -1]
            ok = jnp.where(inside[..., None], has, jnp.where(above[..., None], ~has, True))
            allowed = allowed * ok
        return sum(allowed[..., p, None] * _pull(g, d[p], shape) for p in range(len(d))), None

    xs = (jnp.moveaxis(pi, 1, 0), tuple(pos.T for pos, _, _ in cons_c))
    G, _ = jax.lax.scan(step, G, xs, reverse=True)
    return G


def leading(
    probs,
    layouts,
    model: CountModel,
    thresholds,
    slots: Sequence[tuple[str, int]],
    rank: Mapping[str, jnp.ndarray],
    count_widths=None,
    *,
    max_tuples: int | None = MAX_TUPLES,
    possible: Mapping[str, int] | None = None,
):
    """Candidate objects for indexed selected objects and their weights.

    ``slots``: e.g. ``[("jets", 0), ("jets", 1)]`` for ``jets[0] + jets[1]`` or
    ``[("muons", 0), ("bjets", 0)]``; ``[i]`` is the ``i``-th member of the set ranked
    by ``rank[set]`` (``(E, M)``, descending; ties keep the original order). Returns
    ``(index, weight)``: ``index`` a tuple (one per slot) of ``(E, T)`` object indices
    into the dense collection arrays (use :func:`take`), ``weight`` ``(E, T)`` =
    ``P(those objects are exactly the indexed members of their sets and all count
    conditions hold)``. Candidates whose objects do not exist have weight 0, so an
    event contributes only where the indexed objects exist.

    Candidates: for a set indexed up to ``[r]``, every increasing ``r + 1``-tuple of
    the rank positions of the objects that can be in the set (:func:`can_be_in`; those
    certain to fail it, a width-0 cut failed or a probability of exactly 0, are ranked
    after them and never enumerated: exact), ``C(K, r + 1)`` with ``K`` =
    ``possible[set]`` (static: the most such objects of an event, e.g. from a host
    pass; default ``M``, every object; an event with more gets NaN weights), members of
    the set, with every other object ranked above the last one outside it; sets are combined as a Cartesian product (two sets
    of one collection may pick the same object, as ``jets[0] + bjets[0]`` does in a
    hard-cut analysis).

    Cost per event: one indexed set (``jets[0] + jets[1] + jets[2]``, the common case)
    walks its collection in rank order (:func:`_leading_ranked`), ``O((sum_{j<r}
    C(M, j) + M) M P S_c + C(M, r - 1) M^2 S_c)``; two sets on two collections: the
    one with fewer candidates (``T_b``) constrained per candidate, ``O(T_b N_b P S)``,
    then the walk of the other once per such candidate; otherwise (two sets of one
    collection, ``jets[0] + bjets[0]``, or more sets) each candidate's weight is one
    backward pass with the patterns each object may take under it, ``O(T N P S)``.
    ``T > max_tuples`` raises :class:`ObjectCapError` (``None``: no bound, for callers
    whose per-event object count is capped); ``T`` counts only the candidates of
    objects that can pass (``C(K, r + 1)``).
    """
    slots = tuple((str(name), int(r)) for name, r in slots)
    poss = None if possible is None else tuple(sorted((str(n), int(k))
                                                      for n, k in possible.items()))
    return _leading(
        probs, layouts, model, thresholds, slots, rank, count_widths, max_tuples=max_tuples,
        possible=poss,
    )


@partial(jax.jit, static_argnames=("model", "slots", "max_tuples", "possible"))
def _leading(
    probs,
    layouts,
    model: CountModel,
    thresholds,
    slots: Sequence[tuple[str, int]],
    rank: Mapping[str, jnp.ndarray],
    count_widths=None,
    *,
    max_tuples: int | None = MAX_TUPLES,
    possible: tuple[tuple[str, int], ...] | None = None,
):
    pis, f, bad = _prepare(model, probs, layouts, thresholds, count_widths)
    e = bad.shape[0]
    depth: dict[str, int] = {}
    for name, r in slots:
        model.set_index(name)
        if r < 0:
            raise ConfigError(f"{name}[{r}]: index must be >= 0")
        depth[name] = max(depth.get(name, -1), r)
    names = list(depth)
    given = dict(possible or ())
    combos, orders, ks = [], {}, {}
    for name in names:
        c, i = model.set_index(name)
        m = layouts[c].valid.shape[1]
        can = _can(pis[c], model.patterns[c][:, i])
        ks[name] = min(m, given.get(name, m))
        # more objects that can pass than the static K: NaN, never a silent drop
        bad = bad | (jnp.sum(can, axis=1) > ks[name])
        orders[name] = _order(rank[name], layouts[c], can)  # rank position -> object
        rows = list(itertools.combinations(range(ks[name]), depth[name] + 1))
        combos.append(np.array(rows, dtype=np.int64).reshape(len(rows), depth[name] + 1))
    sizes = [len(x) for x in combos]
    n_tuples = math.prod(sizes)
    if max_tuples is not None and n_tuples > max_tuples:
        raise too_many_tuples(slots, {model.set_index(n)[0]: ks[n] for n in names}, n_tuples,
                              max_tuples)
    if len(names) == 1:  # one indexed set: the rank-order recursion
        name = names[0]
        order = orders[name]
        weight = _leading_ranked(pis, f, model, name, depth[name], order, k=ks[name])
        picked = jnp.take(order, jnp.asarray(combos[0]), axis=1)  # (E, T, depth + 1)
        return tuple(picked[..., r] for _, r in slots), _nan_where(bad, weight)
    # (T, len(names)) index into each set's combos: the Cartesian product.
    grid = np.indices(sizes).reshape(len(sizes), -1).T.reshape(n_tuples, len(sizes))
    cols = model.collections
    if len(names) == 2 and n_tuples and model.set_index(names[0])[0] != model.set_index(
        names[1]
    )[0]:
        # Two sets on two collections (deltaR(muons[0], electrons[0]), muons[0] +
        # bjets[0]): the set with fewer candidates is constrained per candidate (as
        # below), giving one value function each; the other is walked in rank order
        # for all of its candidates at once on every one of them.
        ia = int(np.argmax(sizes))
        ib = 1 - ia
        (ca, _), (cb, jb) = model.set_index(names[ia]), model.set_index(names[ib])
        G = jnp.broadcast_to(f, (e, model.n_states))
        for c in reversed(cols):
            if c not in (ca, cb):
                G = _backward(G, pis[c], model.increments[c], model.shape)
        G = jnp.broadcast_to(G[:, None, :], (e, sizes[ib], model.n_states))
        pos_b = jnp.argsort(orders[names[ib]], axis=1, stable=True)  # object -> rank pos.
        G = _constrained(G, pis[cb], model.increments[cb], model.shape,
                         [(pos_b, jnp.asarray(combos[ib]), jnp.asarray(model.patterns[cb][:, jb]))])
        w = _leading_ranked(pis, f, model, names[ia], depth[names[ia]], orders[names[ia]],
                            G=G.reshape(e * sizes[ib], model.n_states), k=ks[names[ia]])
        w = w.reshape(e, sizes[ib], sizes[ia])
        weight = (jnp.swapaxes(w, 1, 2) if ia == 0 else w).reshape(e, n_tuples)
        picked = {
            name: jnp.take(orders[name], jnp.asarray(combos[a][grid[:, a]]), axis=1)
            for a, name in enumerate(names)
        }
        return tuple(picked[name][..., r] for name, r in slots), _nan_where(bad, weight)
    members: dict[str, jnp.ndarray] = {}
    # Per collection: (object -> rank position (E, M), candidate rank positions (T, r+1),
    # patterns holding the set (P,)) of each indexed set on it.
    cons: dict[str, list] = {}
    for a, name in enumerate(names):
        c, i = model.set_index(name)
        order = orders[name]
        pos = jnp.argsort(order, axis=1, stable=True)  # object -> rank position
        r = jnp.asarray(combos[a][grid[:, a]])  # (T, depth + 1) rank positions
        members[name] = jnp.take(order, r, axis=1)  # (E, T, depth + 1) objects
        cons.setdefault(c, []).append((pos, r, jnp.asarray(model.patterns[c][:, i])))

    def constrained(G, c):
        return _constrained(G, pis[c], model.increments[c], model.shape, cons[c])

    first = min(cols.index(c) for c in cons)
    last = max(cols.index(c) for c in cons)
    G = jnp.broadcast_to(f, (e, model.n_states))
    for c in reversed(cols[last + 1 :]):  # shared by every candidate
        G = _backward(G, pis[c], model.increments[c], model.shape)
    G = jnp.broadcast_to(G[:, None, :], (e, n_tuples, model.n_states))
    for c in reversed(cols[first : last + 1]):
        if c in cons:
            G = constrained(G, c)
        else:
            G = _backward(G, pis[c][:, None], model.increments[c], model.shape)
    F = jnp.zeros((e, model.n_states), dtype=jnp.float64).at[:, 0].set(1.0)
    for c in cols[:first]:  # shared too: forward, then one dot
        F, _ = _forward(F, pis[c], model.increments[c], model.shape)
    G = jnp.sum(F[:, None, :] * G, axis=-1, keepdims=True)
    weight = _nan_where(bad, G[..., 0])
    index = tuple(members[name][..., r] for name, r in slots)
    return index, weight
