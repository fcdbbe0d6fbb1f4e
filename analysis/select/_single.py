"""One object set with one count requirement: the recursions of
:func:`analysis.select.objects.object_weights` and :func:`~analysis.select.objects.event_pass`
written out over a few count states (pure JAX).

The engine's general recursion scans the objects over an ``(events, states)`` table
with slices and concatenations per step; for one set that is mostly overhead
(measured: 200 ms per 10k events under ``jax.jacfwd``, 20 ms here). Here every count
state is its own ``(events,)`` vector in the scan's carry over the ``M`` object
slots. Same quantities, same definitions: the pass table ``f`` is the engine's
(:func:`analysis.select._recursions._pass_table`), the forward distribution ``F_j``
of the objects before ``j``, the value function ``G_{j+1}`` of those after it, ``w_j
= q_j sum_k F_j(k) G_{j+1}(min(k + 1, cap))`` and ``P = G_0(0)``: sums of
non-negative products, no division.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from analysis.select._recursions import _pass_table
from analysis.select.countmodel import CountModel
from analysis.stats.jagged import segment_ids_from_offsets

__all__: list[str] = []

#: Largest ``M * S`` (object slots x count states) for this recursion (its Python
#: loops over the states grow the program with ``S``); above it the engine's runs.
UNROLL_MAX = 640


@partial(jax.jit, static_argnames=("model", "max_objects"))
def single_count_weights(values, offsets, n, width, *, model: CountModel, max_objects: int):
    """``(objects (N,), events (E,))`` for ``model`` = one set, one count.

    ``values``: ``(N,)`` pass probabilities; ``offsets``: ``(E + 1,)`` list boundaries
    (traced or not), at most ``max_objects`` per list. Elements beyond ``offsets[-1]``
    (padding) get weight 0; so do the empty slots of the dense ``(M, E)`` table (``q =
    0``: they never pass, the engine's pattern 0).
    """
    n_events, n_values, m_slots = offsets.shape[0] - 1, values.shape[0], max_objects
    starts = offsets[:-1]
    pos = jnp.arange(m_slots, dtype=starts.dtype)[:, None]
    valid = pos < (offsets[1:] - starts)[None, :]
    index = jnp.where(valid, starts[None, :] + pos, 0)
    # every element's place slot * E + event in the dense table; padding: one zero slot
    event = segment_ids_from_offsets(offsets, n_values)
    slot = jnp.arange(n_values) - starts[jnp.minimum(event, max(n_events - 1, 0))]
    flat_index = jnp.where(event < n_events, slot * n_events + event, m_slots * n_events)
    f, ok = _pass_table(model, jnp.reshape(n, (1,)), jnp.reshape(width, (1,)))
    cap = model.n_states - 1
    q = jnp.where(valid, values[index], 0.0)
    e = n_events

    def forward(prev, p):  # F_j -> F_{j+1}: the object passes (k + 1) or not (k)
        nxt = [(1.0 - p) * prev[0]] if cap >= 1 else [prev[0]]
        nxt += [(1.0 - p) * prev[k] + p * prev[k - 1] for k in range(1, cap)]
        if cap >= 1:
            nxt.append(prev[cap] + p * prev[cap - 1])
        return tuple(nxt), jnp.stack(prev)

    start = tuple(jnp.full((e,), 1.0 if k == 0 else 0.0) for k in range(cap + 1))
    _, before = jax.lax.scan(forward, start, q)  # (M, S, E): F_j

    def backward(g, x):  # G_{j+1} -> G_j, and w_j from F_j and G_{j+1}
        p, fj = x
        up = [g[min(k + 1, cap)] for k in range(cap + 1)]
        inner = sum(fj[k] * up[k] for k in range(cap + 1))
        return tuple((1.0 - p) * g[k] + p * up[k] for k in range(cap + 1)), p * inner

    g_end = tuple(jnp.full((e,), 1.0) * f[k] for k in range(cap + 1))
    g, dense = jax.lax.scan(backward, g_end, (q, before), reverse=True)  # dense: (M, E)
    bad = ~ok
    events = jnp.where(bad, jnp.nan, g[0])
    table = jnp.concatenate([dense.reshape(-1), jnp.zeros((1,), dense.dtype)])
    objects = jnp.where(bad, jnp.nan, table[flat_index])
    return objects, events
