"""The compiled count programs behind :mod:`analysis.soft`'s functions.

``_tail``: ``count_at_least``'s Poisson-binomial tail (:mod:`analysis.select.pbinom`);
:func:`single_count_weights`: ``pass_weights``' recursion over a few count states (the
walk per state, in event blocks: :func:`analysis.select._recursions.dense_weights`, or
compiled kernels); ``_pass_weights``: the same walk over an ``(events, states)`` table
where the states are many; ``_joint``: ``joint_pass_weights``' joint counts over several
object sets (:func:`analysis.select.objects.object_weights`,
:func:`~analysis.select.objects.event_pass`). Each is jit-compiled once per size
bucket (:mod:`analysis.select.softargs`) and count model.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from analysis.select._recursions import _pass_table, dense_weights
from analysis.select.countmodel import CountModel
from analysis.select.objects import event_pass, layout, membership, object_weights
from analysis.select.pbinom import count_distribution, prob_count_at_least


@partial(jax.jit, static_argnames=("cap", "max_count"))
def _tail(values, starts, counts, n, width, *, cap: int, max_count: int):
    q = count_distribution(values, starts, counts, cap, max_count)
    return prob_count_at_least(q, n, width)


#: Largest ``M * S`` (object slots x count states) for :func:`single_count_weights`
#: (its Python loops over the states grow the program with ``S``); above it
#: ``_pass_weights`` runs.
UNROLL_MAX = 640

#: The XLA FFI targets of the one-set walk's compiled kernels, by name
#: (:mod:`analysis.select.singlekernels` registers them).
FFI_TARGETS = ("diffcoffea_single_primal", "diffcoffea_single_tangent",
               "diffcoffea_single_cotangent")


@partial(jax.jit, static_argnames=("model", "max_objects", "fast"))
def single_count_weights(values, offsets, event, n, width, *, model: CountModel,
                         max_objects: int, fast: Callable[..., Any] | None = None):
    """``(objects (N,), events (E,))`` for ``model`` = one set, one count.

    ``values``: ``(N,)`` pass probabilities; ``offsets``: ``(E + 1,)`` list boundaries
    (traced or not), at most ``max_objects`` per list; ``event``: ``(N,)`` the list of
    each element, ``E`` beyond ``offsets[-1]`` (:func:`analysis.stats.offsets.segment_ids_from_offsets`,
    given by the caller: inside this function's own trace the offsets are new tracers,
    whose segment ids a compiled ``stats.derive`` does not know). Elements beyond ``offsets[-1]``
    (padding) get weight 0. ``fast``: a function with
    :func:`~analysis.select._recursions.dense_weights`' signature and results that runs
    the recursion instead (:func:`analysis.select.singlecall.fast_weights`: compiled
    kernels on CPU).
    """
    f, ok = _pass_table(model, jnp.reshape(n, (1,)), jnp.reshape(width, (1,)))
    objects, events = (fast or dense_weights)(values, offsets, event, f, max_objects=max_objects)
    bad = ~ok
    return jnp.where(bad, jnp.nan, objects), jnp.where(bad, jnp.nan, events)


@partial(jax.jit, static_argnames=("model", "max_objects"))
def _pass_weights(values, starts, counts, n, width, *, model: CountModel, max_objects: int):
    lay = layout(starts, counts, max_objects)
    lays = {"objects": lay}
    probs = {"objects": lay.dense(values)}
    th, cw = jnp.reshape(n, (1,)), jnp.reshape(width, (1,))
    weights = object_weights(probs, lays, model, th, cw)["objects"]
    return lay.flat(weights, values.shape[0]), event_pass(probs, lays, model, th, cw)


@partial(jax.jit, static_argnames=("model", "max_objects"))
def _joint(values, starts, counts, th, cw, *, model: CountModel, max_objects):
    lays = {c: layout(starts[c], counts[c], mc) for c, mc in max_objects}
    probs = {s.name: lays[s.collection].dense(values[s.name]) for s in model.sets}
    if not model.counts:
        weights = membership(probs, lays, model)
        ev = jnp.ones(next(iter(probs.values())).shape[0], jnp.float64)
    else:
        weights = object_weights(probs, lays, model, th, cw)
        ev = event_pass(probs, lays, model, th, cw)
    out = {s.name: lays[s.collection].flat(weights[s.name], values[s.name].shape[0])
           for s in model.sets}
    return out, ev
