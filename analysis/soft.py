"""Soft selections for hand-written processors: differentiable cuts and object counts.

``soft_cut(x, op, threshold, width)`` is the probability that ``x op threshold``
passes, smoothed by a logistic of scale ``width`` (``width == 0``: the hard step, with
zero gradient). ``count_at_least(p, n, width)`` is the probability that at least ``n``
objects of each event pass, from the objects' pass probabilities ``p`` (the
Poisson-binomial distribution of the number of passing objects). ``pass_weights(p, n)``
gives the weights of the YAML engine's selection meaning: per object P(it passes and at
least ``n`` objects of its event pass), per event P(at least ``n`` pass). Both are JAX code,
so ``threshold``, ``n`` and the data-dependent probabilities may be traced (inside
:func:`analysis.stats.derive`, ``jax.grad``, ``jax.jit``).

These are the YAML pipeline's own cut functions (:mod:`analysis.pipeline.backends.jax.passes`), so a
hand-written processor selects exactly as a configured one does. Their argument checks
and size buckets are in :mod:`analysis.select.softargs`, their compiled count programs
in :mod:`analysis.select.softprograms`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.limits import check_bytes
from analysis.select.countmodel import OPS, Count, CountModel, ObjectSet, required_cap
from analysis.select.softargs import (
    _as_input,
    _bucket,
    _check_width,
    _collection_labels,
    _cut_kind,
    _object_bucket,
    _probability_lists,
)
from analysis.select.softprograms import (
    UNROLL_MAX,
    _joint,
    _pass_weights,
    _tail,
    single_count_weights,
)
from analysis.stats.jagged import Jagged
from analysis.stats.offsets import (
    concrete,
    lists_mismatch,
    longest_bound,
    padded_segment_ids,
    segment_ids_from_offsets,
)

__all__ = ["count_at_least", "joint_pass_weights", "pass_weights", "soft_cut"]


def soft_cut(x: Any, op: str, threshold: Any, width: Any) -> Any:
    """Pass probability of ``x op threshold`` (``op`` one of the YAML cuts' ops).

    The cut kinds are the YAML engine's (:data:`analysis.select.cuts.KINDS`), so a
    hand-written cut is the configured one: ``sigmoid((x - threshold) / width)`` for
    ``>``/``>=`` (mirrored for ``<``/``<=``); for ``"window"``, ``threshold`` is the pair
    ``(lo, hi)`` and the probability the product of ``x > lo`` and ``x < hi``; for
    ``"around"`` the pair ``(center, half)``, the window ``(center - half, center + half)``.
    ``width == 0`` is the hard step (1 where the cut passes, else 0; the equality
    case decided by ``op``), with zero gradient. ``x``: awkward Array (flat or one
    level of lists), :class:`~analysis.stats.Jagged`, or 1-D numpy/JAX array.
    Returns float64: a :class:`~analysis.stats.Jagged` for lists (usable as a
    ``weight`` of :mod:`analysis.stats` functions and by :func:`count_at_least`),
    otherwise a JAX array of ``x``'s length. Empty input gives empty output.

    Parameters
    ----------
    x : awkward Array, Jagged, or 1-D numpy or JAX array
        The values cut on (flat or one level of lists; upcast to float64).
    op : str
        An op of :data:`analysis.select.cuts.OPS`: ``">"``, ``">="``, ``"<"``, ``"<="``,
        ``"window"``, ``"around"`` (else ``ValueError``).
    threshold : float or JAX scalar, or a pair of them
        The cut value (differentiable); for a kind with several bounds (the window's
        ``lo``, ``hi``; ``around``'s ``center``, ``half``) one value per bound, in the
        kind's order.
    width : float or JAX scalar
        The sigmoid's scale, in the units of ``x``: finite and ``>= 0``; 0 is the hard
        cut.

    Returns
    -------
    Jagged or jax.Array
        The float64 pass probability of every value: a :class:`~analysis.stats.Jagged`
        with ``x``'s lists, else a JAX array of ``x``'s length; empty for empty input.
    """
    kind, bounds = _cut_kind(op, threshold)
    values, offsets = _as_input(x, "soft_cut: x")
    p = kind.probability(
        values,
        bounds,
        _check_width(width, "soft_cut"),
        op=op,
    )
    return p if offsets is None else Jagged(p, offsets)


def count_at_least(p: Any, n: Any, width: Any = 0.0, *, cap: int | None = None) -> Any:
    """Probability that at least ``n`` objects of each list pass, given their pass
    probabilities ``p`` (independent objects: the Poisson-binomial tail).

    ``p``: per-object probabilities with one list per event (a
    :class:`~analysis.stats.Jagged` from :func:`soft_cut`, or an awkward Array).
    ``n`` may be a real number (and traced): between integers the tail is blended
    from ``floor(n)`` to ``floor(n) + 1`` by a smoothed step of scale ``width``
    (``width == 0``: rounds ``n``; integer ``n`` is exact for any width).
    ``cap``: largest count tracked (``P(K >= cap)`` is kept as one bin); it must
    exceed ``n``, and defaults to ``floor(n) + 1`` when ``n`` is a concrete number.
    Returns a float64 JAX array with one probability per list; lists with no
    objects give 1 for ``n <= 0`` and 0 otherwise. Exact with hard 0/1 ``p``.

    For ``K`` the number of passing objects of a list (a sum of independent Bernoulli
    variables of probabilities ``p_i``), the result is ``P(K >= n)``, computed by the
    exact recursion over the objects of the count distribution (up to ``cap``).

    Parameters
    ----------
    p : Jagged or awkward Array
        The objects' pass probabilities, one list per event (the offsets must be
        concrete).
    n : float, int or JAX scalar
        The required count (may be real and traced; then give ``cap``).
    width : float or JAX scalar, optional
        Scale of the smoothed step between integer counts (default 0: ``n`` rounded).
    cap : int or None, optional
        Keyword-only. The largest count tracked, above ``n`` (default ``floor(n) + 1``
        for a concrete ``n``).

    Returns
    -------
    jax.Array
        float64 ``(num_lists,)``: ``P(K >= n)`` per list; empty for no lists.
    """
    values, offsets, off = _probability_lists(p, "count_at_least")
    given_cap = cap
    if cap is None:
        n_value = concrete(n) if isinstance(n, jax.Array) else np.asarray(n)
        if n_value is None:
            raise ValueError("count_at_least: n is traced; pass cap= (an int above n)")
        n_value = np.asarray(n_value)
        if n_value.size != 1 or not math.isfinite(float(n_value)):
            raise ValueError(f"count_at_least: n: expected a finite number, found {n!r}")
        cap = int(math.floor(float(n_value))) + 1
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1:
        raise ValueError(f"count_at_least: cap: expected an integer >= 1, found {cap!r}")
    counts = np.diff(off).astype(np.int32)
    n_events = counts.shape[0]
    max_count = int(counts.max()) if n_events else 0
    # Padded to size buckets (empty extra events, zero extra objects) so that chunks of
    # similar sizes share one compiled recursion instead of compiling one per chunk.
    ev_size, obj_size = _bucket(n_events), _bucket(values.shape[0])
    # The recursion holds (events, cap + 1) probabilities: refuse an n of 1e9 here, in
    # one line, rather than in the allocator (or the out-of-memory killer).
    check_bytes(
        "count_at_least: n" if given_cap is None else "count_at_least: cap",
        8.0 * ev_size * (cap + 1), f"{cap + 1} count states x {ev_size} events",
    )
    starts = np.zeros(ev_size, dtype=np.int32)
    starts[:n_events] = off[:-1]
    padded_counts = np.zeros(ev_size, dtype=np.int32)
    padded_counts[:n_events] = counts
    values = jnp.concatenate([values, jnp.zeros(obj_size - values.shape[0], values.dtype)])
    tail = _tail(
        values,
        starts,
        padded_counts,
        jnp.asarray(n, dtype=jnp.float64),
        _check_width(width, "count_at_least"),
        cap=int(cap),
        max_count=_bucket(max_count),
    )
    return tail[:n_events]


def pass_weights(p: Any, n: Any, *, width: Any = 0.0, cap: int | None = None) -> tuple[Any, Any]:
    """Selection weights of "at least ``n`` objects pass": per object and per event.

    The YAML engine's meaning of an object selection with a count requirement, for a
    hand-written processor: an object is weighted by the probability that it passes
    *and* its event passes, an event by the probability that it passes.

    Parameters
    ----------
    p : Jagged or awkward Array
        Per-object pass probabilities in [0, 1], one list per event (e.g.
        ``soft_cut(pt, ">", a, 5.0) * soft_cut(abs(eta), "<", b, 0.1)``); may be traced
        (inside :func:`analysis.stats.derive`, ``jax.grad``); its list offsets must be
        concrete.
    n : number or JAX scalar
        Required count, ``K >= n`` with ``K`` the number of passing objects. A real
        ``n`` between integers is the engine's soft count requirement: the expectation
        of ``(1 - s) [K >= floor n] + s [K >= floor n + 1]``, ``s =
        integer_step(n - floor n, width)``; integer ``n`` is exact for every width,
        ``width == 0`` rounds a non-integer ``n``. May be traced (a parameter).
    width : float, keyword-only
        Width of the soft integer step of ``n`` (0: none).
    cap : int, keyword-only
        Largest ``n`` the results must be exact for (the upper bound of a trainable
        ``n``). Default: ``ceil(n)`` for a concrete ``n``, the chunk's largest
        multiplicity + 1 for a traced one (exact for every ``n``; more count states).
        A traced ``n`` above ``cap`` gives NaN (as the engine), unless ``cap`` exceeds
        every event's multiplicity (then the weights are 0, exactly).

    Returns
    -------
    objects : Jagged
        ``P(object j passes and K >= n) = p_j P(K_{-j} >= n - 1)`` (``K_{-j}``: the
        other objects of its event), float64, the lists of ``p``.
    events : jax.Array
        ``P(K >= n)`` per event, float64, shape ``(num_lists,)``.

    Both are the exact expectations of the hard-cut weights ``[j passes] [K >= n]`` and
    ``[K >= n]`` under independent object passes (Poisson-binomial ``K``), computed by
    the engine's recursions (those of :func:`analysis.select.objects.object_weights` and
    :func:`~analysis.select.objects.event_pass` on a one-set
    :class:`~analysis.select.countmodel.CountModel`, with the engine's pass table,
    walked per state for one set: :func:`analysis.select._recursions.dense_weights`): sums of non-negative products,
    no division, exact at ``p`` in {0, 1}; differentiable in ``p`` and ``n`` (forward
    and reverse, every order). On CPU the recursion and its first derivatives (forward
    and reverse mode, all of ``jax.jacfwd``'s parameters in one call) run as compiled
    kernels inside the program (:mod:`analysis.select.singlecall`: XLA FFI calls, kept
    by JAX's persistent compilation cache); second derivatives and other platforms use
    the JAX recursion; the same values and derivatives to rounding. ``n <= 0``:
    ``objects == p``, ``events == 1``; ``n``
    above an event's multiplicity: zeros there. Events without objects: ``events`` is
    1 for ``n <= 0``, else 0. Empty input (no events) gives empty outputs.
    """
    values, offsets = _as_input(p, "pass_weights: p")
    if offsets is None:
        raise ValueError("pass_weights: p: expected one list of probabilities per event")
    off = concrete(offsets)
    longest = longest_bound(offsets)
    if longest is None:
        raise ValueError("pass_weights: p: the list offsets must be concrete (not traced)")
    n_events, n_objects = offsets.shape[0] - 1, values.shape[0]
    m = _object_bucket(longest)
    n_value = concrete(n) if isinstance(n, jax.Array) else np.asarray(n)
    if n_value is not None:
        n_value = np.asarray(n_value)
        if n_value.size != 1 or not math.isfinite(float(n_value)):
            raise ValueError(f"pass_weights: n: expected a finite number, found {n!r}")
    if cap is not None and (
        isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 0
    ):
        raise ValueError(f"pass_weights: cap: expected an integer >= 0, found {cap!r}")
    if cap is None:
        cap = m + 1 if n_value is None else required_cap(">=", math.ceil(float(n_value)))
    # Above every multiplicity the requirement fails for all events: the count states
    # stop one above the largest multiplicity and n is clipped there (exactly 0, zero
    # gradient) instead of tracking states no event reaches.
    clip = int(cap) >= m + 1
    cap = min(int(cap), m + 1)
    # Concrete lists are padded to size buckets (empty extra events, zero extra objects)
    # so that chunks of similar sizes share one compiled recursion; traced ones come
    # padded already (stats.derive's buckets).
    ev_size = _bucket(n_events) if off is not None else n_events
    obj_size = _bucket(n_objects) if off is not None else n_objects
    check_bytes("pass_weights: n", 8.0 * ev_size * m * (cap + 1),
                f"{cap + 1} count states x {m} objects x {ev_size} events")
    model = CountModel((ObjectSet("objects", "objects"),),
                       (Count(("objects",), ">=", cap),))
    n_arr = jnp.asarray(n, dtype=jnp.float64)
    if clip:
        n_arr = jnp.minimum(n_arr, float(cap))
    width_arr = _check_width(width, "pass_weights")
    if off is not None:
        padded = np.full(ev_size + 1, off[-1], dtype=np.int32)
        padded[: n_events + 1] = off
        offsets_b = padded
        values = jnp.concatenate([values, jnp.zeros(obj_size - n_objects, values.dtype)])
    else:
        offsets_b = offsets
    if m * (cap + 1) <= UNROLL_MAX:
        # the list of every element: on the host for concrete lists, the compiled
        # stats.derive's argument for traced ones (no prefix sum in the program)
        event = (padded_segment_ids(offsets_b, obj_size) if off is not None
                 else segment_ids_from_offsets(offsets, n_objects))
        # here, not at the top: the compiled kernels load numba (~5 s), which a user of
        # soft_cut or of the statistics alone never needs
        from analysis.select.singlecall import available, fast_weights

        obj, ev = single_count_weights(values, offsets_b, event, n_arr, width_arr,
                                       model=model, max_objects=m,
                                       fast=fast_weights if available() else None)
    else:
        if off is None:
            raise ValueError("pass_weights: p: the list offsets must be concrete (not traced) "
                             f"for {cap + 1} count states x {m} objects")
        starts = np.asarray(offsets_b[:-1])
        obj, ev = _pass_weights(values, starts, np.diff(offsets_b), n_arr, width_arr,
                                model=model, max_objects=m)
    return Jagged(obj[:n_objects], offsets), ev[:n_events]


def joint_pass_weights(
    sets: Mapping[str, Any],
    counts: Sequence[tuple[Any, str, Any]],
    *,
    parents: Mapping[str, str] | None = None,
    collections: Mapping[str, str] | None = None,
    widths: Sequence[Any] | None = None,
) -> tuple[dict[str, Any], Any]:
    """Selection weights of several object sets with joint count requirements.

    The YAML engine's ``objects:`` form for a hand-written processor: every object of
    every set is weighted by P(it is in the set and *all* count requirements hold), every
    event by P(all hold).

    Parameters
    ----------
    sets : mapping of name to Jagged or awkward Array
        Each set's *own* per-object pass probability (one list per event). A set derived
        from another (``parents``) holds an object only if the parent holds it too:
        ``P(j in bjets) = p_jets(j) * p_bjets(j)``, its lists those of its parent.
    counts : sequence of ``(sets, op, n)``
        ``K op n`` with ``K`` the number of members of one set (a name) or of several
        (a tuple of names, an object counted once per set holding it; sets of different
        collections add up), ``op`` one of ``> >= < <= ==``, ``n`` a number or a traced
        scalar (real ``n``: the soft integer step of ``widths``, as :func:`pass_weights`).
    parents : mapping, keyword-only
        ``{derived set: parent set}``.
    collections : mapping, keyword-only
        ``{set: collection label}``; sets of one collection are the same objects (one
        object may be in several of them). Default: every root set is a collection of its
        own, a derived set belongs to its parent's.
    widths : sequence, keyword-only
        Width of each count's soft integer step (default 0).

    Returns
    -------
    objects : dict of name to Jagged
        ``P(object in set and all counts hold)``, float64, the set's lists.
    events : jax.Array
        ``P(all counts hold)`` per event, float64.

    Exact expectations of the hard-cut weights under independent passes of every
    object and set (the joint multi-dimensional Poisson-binomial count, never a product
    of marginals), by the engine's recursions
    (:func:`analysis.select.objects.object_weights`, :func:`~analysis.select.objects.event_pass`);
    differentiable in every probability and ``n``. Count states stop one above the
    largest possible count, where every requirement is constant: any ``n`` is exact (a
    larger ``n`` is clipped there). No events: empty outputs; no counts: ``events`` 1
    and the set membership probabilities as ``objects``.
    """
    parents = dict(parents or {})
    names = list(sets)
    label = _collection_labels(sets, parents, collections)
    parts = {n: _as_input(sets[n], f"joint_pass_weights: sets[{n!r}]") for n in names}
    first: dict[str, str] = {}
    n_events = None
    for n in names:
        values, offsets = parts[n]
        if offsets is None or concrete(offsets) is None:
            raise ValueError(f"joint_pass_weights: sets[{n!r}]: expected one list per event "
                             "with concrete offsets")
        if n_events is None:
            n_events = offsets.shape[0] - 1
        elif offsets.shape[0] - 1 != n_events:
            raise ValueError(f"joint_pass_weights: sets[{n!r}]: {offsets.shape[0] - 1} events, "
                             f"expected {n_events}")
        c = label[n]
        if c in first:
            why = lists_mismatch(parts[first[c]][1], offsets)
            if why is not None:
                raise ValueError(f"joint_pass_weights: sets[{n!r}]: {why} (the lists of "
                                 f"{first[c]!r}, same collection)")
        else:
            first[c] = n
    assert n_events is not None
    ev_size = _bucket(n_events)
    cols = list(first)
    offs = {c: concrete(parts[first[c]][1]) for c in cols}
    m = {c: _object_bucket(int(np.diff(offs[c]).max()) if n_events else 0) for c in cols}
    model_counts, thresholds = [], []
    for i, entry in enumerate(counts):
        if len(entry) != 3:
            raise ValueError(f"joint_pass_weights: counts[{i}]: expected (sets, op, n)")
        which, op, n = entry
        which = (which,) if isinstance(which, str) else tuple(which)
        if op not in OPS:
            raise ValueError(f"joint_pass_weights: counts[{i}]: op: expected one of "
                             f"{', '.join(OPS)}, found {op!r}")
        for name in which:
            if name not in sets:
                raise ValueError(f"joint_pass_weights: counts[{i}]: {name!r} is not a set")
        n_value = concrete(n) if isinstance(n, jax.Array) else np.asarray(n)
        if n_value is not None and (np.asarray(n_value).size != 1
                                    or not math.isfinite(float(n_value))):
            raise ValueError(f"joint_pass_weights: counts[{i}]: n: expected a finite number, "
                             f"found {n!r}")
        # every requirement is constant for counts above the largest possible one
        top = sum(m[label[name]] for name in which) + 1
        cap = top + 1
        if n_value is not None:
            cap = min(cap, required_cap(op, math.ceil(float(n_value))))
        model_counts.append(Count(which, op, cap))
        thresholds.append(jnp.minimum(jnp.asarray(n, dtype=jnp.float64), float(top)))
    n_counts = len(model_counts)
    if widths is None:
        widths = [0.0] * n_counts
    if len(widths) != n_counts:
        raise ValueError(f"joint_pass_weights: widths: expected {n_counts} values (one per "
                         f"count), found {len(widths)}")
    cw = [_check_width(w, "joint_pass_weights") for w in widths]
    model = CountModel(
        tuple(ObjectSet(n, label[n], parents.get(n)) for n in names), tuple(model_counts)
    )
    states = model.n_states * max(m.values())
    check_bytes("joint_pass_weights: counts", 8.0 * ev_size * states,
                f"{model.n_states} joint count states x {max(m.values())} objects x "
                f"{ev_size} events")
    starts, cnts, sizes = {}, {}, {}
    for c in cols:
        counts_c = np.diff(offs[c]).astype(np.int32)
        starts[c] = np.zeros(ev_size, dtype=np.int32)
        starts[c][:n_events] = offs[c][:-1]
        cnts[c] = np.zeros(ev_size, dtype=np.int32)
        cnts[c][:n_events] = counts_c
        sizes[c] = int(offs[c][-1])
    values = {}
    for n in names:
        size = sizes[label[n]]
        v = parts[n][0]
        values[n] = jnp.concatenate([v, jnp.zeros(_bucket(size) - size, v.dtype)])
    th = jnp.stack(thresholds) if thresholds else jnp.zeros((0,), jnp.float64)
    cwa = jnp.stack(cw) if cw else jnp.zeros((0,), jnp.float64)
    obj, ev = _joint(values, starts, cnts, th, cwa, model=model,
                     max_objects=tuple(sorted(m.items())))
    out = {n: Jagged(obj[n][: sizes[label[n]]], parts[first[label[n]]][1]) for n in names}
    return out, ev[:n_events]
