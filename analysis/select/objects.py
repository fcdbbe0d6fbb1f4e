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
per-event ``starts`` and ``counts``, as :mod:`analysis.pipeline.kernel` uses); :func:`layout`
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
with ``T`` candidate tuples (``C(M, r + 1)`` for a set indexed up to ``[r]``): one
indexed set (``jets[0] + jets[1] + jets[2]``) ``O((sum_{j<r} C(M, j) + M) M P S_c +
C(M, r - 1) M^2 S_c)`` by a walk in rank order (:func:`_leading_ranked`; ``S_c``: the
states of the count variables its collection touches), several sets (``muons[0] +
bjets[0]``) at most ``O(T N_c P S)`` with ``N_c`` objects of their collections (two
sets on two collections: the walk once per candidate of the smaller one); ``T`` is
bounded by ``max_tuples`` (:class:`ObjectCapError`). Caps: ``max_objects`` per
collection and event (:func:`check_counts` raises :class:`ObjectCapError` on the
host, naming file and entry; inside a traced function an event beyond the layout's
width gets NaN results), ``cap`` per count (from the threshold or its upper bound).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis.errors import ConfigError, InputError
from analysis.limits import check_bytes
from analysis.select.pbinom import at_least

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

OPS = (">", ">=", "<", "<=", "==")


class ObjectCapError(InputError):
    """An event has more objects, or an observable more candidate tuples, than a cap allows."""


# --- cuts ------------------------------------------------------------------------------


def soft_pass(value, threshold, width, *, greater: bool, inclusive: bool):
    """``P(value > threshold)`` (``greater``) or ``P(value < threshold)``, smoothed:
    ``sigmoid(z / width)`` with ``z = value - threshold`` (or ``threshold - value``);
    ``width == 0`` is the hard step ``z > 0`` (``z >= 0`` if ``inclusive``) with zero
    gradient. The one soft cut of both kernels (:mod:`analysis.pipeline.kernel` re-exports it);
    float64, any shape."""
    z = value - threshold if greater else threshold - value
    soft = width > 0
    s = jax.nn.sigmoid(z / jnp.where(soft, width, 1.0))
    hard = (z >= 0) if inclusive else (z > 0)
    return jnp.where(soft, s, hard.astype(z.dtype))


# --- layout ----------------------------------------------------------------------------


class Layout(NamedTuple):
    """Dense view of one collection in one chunk (a pytree of arrays).

    ``index``: ``(E, M)`` int32 flat index of the ``m``-th object of each event (0 for
    padding); ``valid``: ``(E, M)`` bool, ``m < count``; ``overflow``: ``(E,)`` bool,
    ``count > M`` (such events get NaN results).
    """

    index: jnp.ndarray
    valid: jnp.ndarray
    overflow: jnp.ndarray

    def dense(self, values, *, fill=0.0):
        """Flat per-object ``values`` ``(N,)`` as ``(E, M)``, ``fill`` at padding."""
        values = jnp.asarray(values)
        if values.shape[0] == 0:
            return jnp.full(self.index.shape, fill, dtype=values.dtype)
        return jnp.where(self.valid, values[self.index], fill)

    def flat(self, dense, n_objects: int):
        """Inverse of :meth:`dense`: ``(E, M)`` back to flat ``(n_objects,)`` (0 where no
        dense entry maps to an object)."""
        target = jnp.where(self.valid, self.index, n_objects)
        out = jnp.zeros((n_objects,), dtype=dense.dtype)
        return out.at[target.reshape(-1)].set(dense.reshape(-1), mode="drop")


def layout(starts, counts, max_objects: int) -> Layout:
    """:class:`Layout` of a collection with per-event ``starts`` and ``counts`` (``(E,)``
    ints) and at most ``max_objects`` objects per event (static). Empty input (``E = 0``)
    gives empty arrays."""
    starts = jnp.asarray(starts, dtype=jnp.int32)
    counts = jnp.asarray(counts, dtype=jnp.int32)
    pos = jnp.arange(max_objects, dtype=jnp.int32)
    valid = pos[None, :] < counts[:, None]
    index = jnp.where(valid, starts[:, None] + pos[None, :], 0)
    return Layout(index, valid, counts > max_objects)


def check_counts(
    counts, max_objects: int, *, collection: str, source: str | None = None, offset: int = 0,
    key: str | None = None,
) -> None:
    """Raise :class:`ObjectCapError` (one line) if an event of ``collection`` has more
    than ``max_objects`` objects (host side, on concrete counts). ``source`` (a file)
    and ``offset`` (its first entry) locate the event; ``key`` names the setting to
    raise. Nothing is truncated: beyond a cap there is no result."""
    counts = np.asarray(counts)
    if counts.size and int(counts.max()) > max_objects:
        event = int(np.argmax(counts))
        where = f"{source}: " if source else ""
        raise ObjectCapError(
            f"{where}collection {collection!r}: event {offset + event} has "
            f"{int(counts.max())} objects, more than max_objects={max_objects}; raise "
            f"{key or 'the cap'}"
        )


def take(values, index):
    """``values[e, index[e, t]]``: per-event gather of ``(E, M)`` values at ``(E, T)``
    object indices (as returned by :func:`leading`)."""
    return jnp.take_along_axis(values, index, axis=1)


# --- the model -------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectSet:
    """A named set of objects of ``collection``; with ``parent``, a subset of it."""

    name: str
    collection: str
    parent: str | None = None


def required_cap(op: str, n: int) -> int:
    """Smallest exact cap for the condition ``K op n`` (integer ``n >= 0``): ``n`` for
    ``>=`` and ``<``, ``n + 1`` for ``>``, ``<=`` and ``==``."""
    if op not in OPS:
        raise ConfigError(f"count op {op!r}: expected one of {', '.join(OPS)}")
    return max(int(n), 0) + (0 if op in (">=", "<") else 1)


@dataclass(frozen=True)
class Count:
    """The condition ``K op n`` on ``K`` = number of members of ``sets`` (with
    multiplicity, several collections allowed); states ``0..cap`` are tracked, the top
    one meaning ``K >= cap`` (see :func:`required_cap`). ``n`` is a traced input."""

    sets: tuple[str, ...]
    op: str
    cap: int


@dataclass(frozen=True)
class CountModel:
    """Object sets and count conditions (static: hashable, usable as a jit static arg).

    Derived tables (patterns, transfer maps) are computed once per model."""

    sets: tuple[ObjectSet, ...]
    counts: tuple[Count, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [s.name for s in self.sets]
        dup = [n for n, k in Counter(names).items() if k > 1]
        if dup:
            raise ConfigError(f"object set {dup[0]!r} is defined twice")
        by_name = {s.name: s for s in self.sets}
        for s in self.sets:
            seen = {s.name}
            p = s.parent
            while p is not None:
                if p not in by_name:
                    raise ConfigError(f"object set {s.name!r}: parent {p!r} is not a set")
                if by_name[p].collection != s.collection:
                    raise ConfigError(
                        f"object set {s.name!r}: parent {p!r} is a set of "
                        f"{by_name[p].collection!r}, not {s.collection!r}"
                    )
                if p in seen:
                    raise ConfigError(f"object set {s.name!r}: cycle in parents via {p!r}")
                seen.add(p)
                p = by_name[p].parent
        for c in self.counts:
            if c.op not in OPS:
                raise ConfigError(f"count over {list(c.sets)}: op {c.op!r} is not one of {OPS}")
            if not c.sets:
                raise ConfigError("count over no set")
            for name in c.sets:
                if name not in by_name:
                    raise ConfigError(f"count over {list(c.sets)}: {name!r} is not a set")
            if c.cap < 0:
                raise ConfigError(f"count over {list(c.sets)}: cap {c.cap} is negative")

    # static tables -----------------------------------------------------------------

    @cached_property
    def collections(self) -> tuple[str, ...]:
        """Collections in order of first appearance."""
        return tuple(dict.fromkeys(s.collection for s in self.sets))

    @cached_property
    def _sets_of(self) -> dict[str, tuple[ObjectSet, ...]]:
        """Sets of each collection, parents before children."""
        out: dict[str, list[ObjectSet]] = {c: [] for c in self.collections}
        by_name = {s.name: s for s in self.sets}

        def depth(s: ObjectSet) -> int:
            return 0 if s.parent is None else 1 + depth(by_name[s.parent])

        for s in sorted(self.sets, key=depth):
            out[s.collection].append(s)
        return {c: tuple(v) for c, v in out.items()}

    @cached_property
    def patterns(self) -> dict[str, np.ndarray]:
        """Per collection, ``(P, n_sets)`` bool: which sets hold an object in each pattern
        (pattern 0 = in no set)."""
        out = {}
        for c, sets in self._sets_of.items():
            idx = {s.name: i for i, s in enumerate(sets)}
            rows = []
            for bits in itertools.product((False, True), repeat=len(sets)):
                if all(
                    not b or s.parent is None or bits[idx[s.parent]] for b, s in zip(bits, sets)
                ):
                    rows.append(bits)
            out[c] = np.array(rows, dtype=bool).reshape(len(rows), len(sets))
        return out

    @cached_property
    def variables(self) -> tuple[tuple[tuple[str, ...], int], ...]:
        """Count variables: ``(sorted sets with multiplicity, cap)``, one per distinct
        multiset of counted sets, with the largest cap of its conditions."""
        caps: dict[tuple[str, ...], int] = {}
        for c in self.counts:
            key = tuple(sorted(c.sets))
            caps[key] = max(caps.get(key, 0), c.cap)
        return tuple(caps.items())

    @cached_property
    def shape(self) -> tuple[int, ...]:
        """Shape of the joint count state: ``(cap_v + 1, ...)``."""
        return tuple(cap + 1 for _, cap in self.variables)

    @cached_property
    def n_states(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def _state_counts(self) -> np.ndarray:
        """``(S, V)``: the count of each variable in each flat state."""
        if not self.shape:
            return np.zeros((1, 0), dtype=np.int64)
        grid = np.indices(self.shape).reshape(len(self.shape), -1).T
        return grid.reshape(self.n_states, len(self.shape))

    @cached_property
    def targets(self) -> dict[str, np.ndarray]:
        """Per collection, ``(P, S)`` int: flat state after adding one object of each
        pattern to each state (absorbing at the caps)."""
        caps = np.array([cap for _, cap in self.variables], dtype=np.int64)
        out = {}
        for c in self._sets_of:
            pats = self.patterns[c]
            d = self.increments[c]
            new = np.minimum(self._state_counts[None, :, :] + d[:, None, :], caps)
            if len(self.shape):
                out[c] = np.ravel_multi_index(tuple(np.moveaxis(new, -1, 0)), self.shape)
            else:
                out[c] = np.zeros((len(pats), 1), dtype=np.int64)
        return out

    @cached_property
    def increments(self) -> dict[str, np.ndarray]:
        """Per collection, ``(P, V)`` int: how much an object of each pattern adds to
        each count variable."""
        out = {}
        for c, sets in self._sets_of.items():
            pats = self.patterns[c]
            d = np.zeros((len(pats), len(self.variables)), dtype=np.int64)
            for v, (names, _) in enumerate(self.variables):
                mult = Counter(names)
                for i, s in enumerate(sets):
                    d[:, v] += pats[:, i] * mult.get(s.name, 0)
            out[c] = d
        return out

    def set_index(self, name: str) -> tuple[str, int]:
        """``(collection, position of the set in its collection's patterns)``."""
        for c, sets in self._sets_of.items():
            for i, s in enumerate(sets):
                if s.name == name:
                    return c, i
        raise ConfigError(f"{name!r} is not an object set")


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
    e = bad.shape[0]
    S = model.n_states
    cols = model.collections
    # Distribution of everything before collection i and value function after it.
    before = []
    F = jnp.zeros((e, S), dtype=jnp.float64).at[:, 0].set(1.0)
    stacks = {}
    for c in cols:
        before.append(F)
        F, stacks[c] = _forward(F, pis[c], model.increments[c], model.shape)
    out = {}
    G = jnp.broadcast_to(f, (e, S))
    for c in reversed(cols):
        d = model.increments[c]

        def step(g, xs, d=d):
            pi_m, f_m = xs
            # value after this object given its pattern p, and h_p = sum_k F(k) G(tgt_p(k))
            gt = [_pull(g, d[p], model.shape) for p in range(len(d))]
            h = jnp.stack([jnp.sum(f_m * gp, axis=-1) for gp in gt], axis=-1)
            return sum(pi_m[:, p, None] * gp for p, gp in enumerate(gt)), pi_m * h

        G, wp = jax.lax.scan(step, G, (jnp.moveaxis(pis[c], 1, 0), stacks[c]), reverse=True)
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


def _leading_ranked(pis, f, model: CountModel, name: str, depth: int, order, G=None):
    """Weights of every candidate ``(a_0 < ... < a_r)`` (``r = depth``, rank positions)
    of one indexed set ``name``, ``(E, C(M, r + 1))``, in :func:`_combos` order.

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
    cands = _combos(m, depth + 1)
    if not len(cands):
        return jnp.zeros((e, 0), dtype=jnp.float64)
    if depth == 0:
        return R[0][:, cands[:, 0], 0]
    layers = [_combos(m, j) for j in range(depth)]
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
    max_tuples: int | None = 4096,
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
    rank positions (``C(M, r + 1)``), members of the set, with every other object ranked
    above the last one outside it; sets are combined as a Cartesian product (two sets
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
    whose per-event object count is capped).
    """
    slots = tuple((str(name), int(r)) for name, r in slots)
    return _leading(
        probs, layouts, model, thresholds, slots, rank, count_widths, max_tuples=max_tuples
    )


@partial(jax.jit, static_argnames=("model", "slots", "max_tuples"))
def _leading(
    probs,
    layouts,
    model: CountModel,
    thresholds,
    slots: Sequence[tuple[str, int]],
    rank: Mapping[str, jnp.ndarray],
    count_widths=None,
    *,
    max_tuples: int | None = 4096,
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
    combos = []
    for name in names:
        c, _ = model.set_index(name)
        m = layouts[c].valid.shape[1]
        rows = list(itertools.combinations(range(m), depth[name] + 1))
        combos.append(np.array(rows, dtype=np.int64).reshape(len(rows), depth[name] + 1))
    sizes = [len(x) for x in combos]
    n_tuples = math.prod(sizes)
    if max_tuples is not None and n_tuples > max_tuples:
        ms = ", ".join(f"{model.set_index(n)[0]}: {layouts[model.set_index(n)[0]].valid.shape[1]}"
                       for n in names)
        raise ObjectCapError(
            f"{' + '.join(f'{n}[{r}]' for n, r in slots)}: {n_tuples} candidate tuples "
            f"per event (objects per event {ms}) exceed max_tuples={max_tuples}; set "
            "max_objects on the collection to allow them"
        )
    if len(names) == 1:  # one indexed set: the rank-order recursion
        name = names[0]
        c, _ = model.set_index(name)
        lay = layouts[c]
        key = jnp.where(lay.valid, jnp.asarray(rank[name], dtype=jnp.float64), -jnp.inf)
        order = jnp.argsort(-key, axis=1, stable=True)  # rank position -> object
        weight = _leading_ranked(pis, f, model, name, depth[name], order)
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
        orders = {}
        for name in names:
            c, _ = model.set_index(name)
            key = jnp.where(layouts[c].valid, jnp.asarray(rank[name], dtype=jnp.float64),
                            -jnp.inf)
            orders[name] = jnp.argsort(-key, axis=1, stable=True)  # rank position -> object
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
                            G=G.reshape(e * sizes[ib], model.n_states))
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
        lay = layouts[c]
        key = jnp.where(lay.valid, jnp.asarray(rank[name], dtype=jnp.float64), -jnp.inf)
        order = jnp.argsort(-key, axis=1, stable=True)  # rank position -> object
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
