"""The compiled count programs behind :mod:`analysis.soft`'s functions.

``_tail``: ``count_at_least``'s Poisson-binomial tail (:mod:`analysis.select.pbinom`);
``_pass_weights``: ``pass_weights``' recursion where the unrolled single-count
kernels do not apply; ``_joint``: ``joint_pass_weights``' joint counts over several
object sets (:func:`analysis.select.objects.object_weights`,
:func:`~analysis.select.objects.event_pass`). Each is jit-compiled once per size
bucket (:mod:`analysis.select.softargs`) and count model.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from analysis.select.countmodel import CountModel
from analysis.select.objects import event_pass, layout, membership, object_weights
from analysis.select.pbinom import count_distribution, prob_count_at_least


@partial(jax.jit, static_argnames=("cap", "max_count"))
def _tail(values, starts, counts, n, width, *, cap: int, max_count: int):
    q = count_distribution(values, starts, counts, cap, max_count)
    return prob_count_at_least(q, n, width)


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
