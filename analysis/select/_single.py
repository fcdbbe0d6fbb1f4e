"""One object set with one count requirement: the recursions of
:func:`analysis.select.objects.object_weights` and :func:`~analysis.select.objects.event_pass`
written out over a few count states (pure JAX).

The engine's general recursion scans the objects over an ``(events, states)`` table
with slices and concatenations per step; for one set that is mostly overhead
(measured: 200 ms per 10k events under ``jax.jacfwd``, 20 ms here). Here every count
state is its own vector over events in the scan's carry over the ``M`` object
slots. Same quantities, same definitions: the pass table ``f`` is the engine's
(:func:`analysis.select._recursions._pass_table`), the forward distribution ``F_j``
of the objects before ``j``, the value function ``G_{j+1}`` of those after it, ``w_j
= q_j sum_k F_j(k) G_{j+1}(min(k + 1, cap))`` and ``P = G_0(0)``: sums of
non-negative products, no division.

The events go through the recursion in blocks of :func:`event_block` (a loop over
blocks, each running the scans over the slots): the forward distributions that the
backward scan reads, ``(M, states, block)``, then stay in the processor's cache and
are one small buffer reused by every block, instead of an ``(M, states, events)``
array written and read once per chunk (measured on 50k-event chunks of generated
ttbar, 20 slots, 3 states: under ``jax.jacfwd`` 62 -> 21 ms of CPU time, and no
longer 24k page faults per call for freshly allocated arrays).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from analysis.select._recursions import _pass_table
from analysis.select.countmodel import CountModel

__all__: list[str] = []

#: Largest ``M * S`` (object slots x count states) for this recursion (its Python
#: loops over the states grow the program with ``S``); above it the engine's runs.
UNROLL_MAX = 640

#: The XLA FFI targets of the recursion's compiled kernels, by name
#: (:mod:`analysis.select.singlekernels` registers them).
FFI_TARGETS = ("diffcoffea_single_primal", "diffcoffea_single_tangent",
               "diffcoffea_single_cotangent")

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


def _forward_step(prev, p, cap: int):
    """``F_j -> F_{j+1}``: the object passes (``k + 1``, the top state absorbing) or not."""
    if cap == 0:
        return (prev[0],)
    nxt = [(1.0 - p) * prev[0]]
    nxt += [(1.0 - p) * prev[k] + p * prev[k - 1] for k in range(1, cap)]
    nxt.append(prev[cap] + p * prev[cap - 1])
    return tuple(nxt)


@partial(jax.jit, static_argnames=("model", "max_objects", "fast"))
def single_count_weights(values, offsets, event, n, width, *, model: CountModel,
                         max_objects: int, fast: Callable[..., Any] | None = None):
    """``(objects (N,), events (E,))`` for ``model`` = one set, one count.

    ``values``: ``(N,)`` pass probabilities; ``offsets``: ``(E + 1,)`` list boundaries
    (traced or not), at most ``max_objects`` per list; ``event``: ``(N,)`` the list of
    each element, ``E`` beyond ``offsets[-1]`` (:func:`analysis.stats.offsets.segment_ids_from_offsets`,
    given by the caller: inside this function's own trace the offsets are new tracers,
    whose segment ids a compiled ``stats.derive`` does not know). Elements beyond ``offsets[-1]``
    (padding) get weight 0. ``fast``: a function with :func:`dense_weights`'s signature
    and results that runs the recursion instead
    (:func:`analysis.select.singlecall.fast_weights`: compiled kernels on CPU).
    """
    f, ok = _pass_table(model, jnp.reshape(n, (1,)), jnp.reshape(width, (1,)))
    objects, events = (fast or dense_weights)(values, offsets, event, f, max_objects=max_objects)
    bad = ~ok
    return jnp.where(bad, jnp.nan, objects), jnp.where(bad, jnp.nan, events)


def dense_weights(values, offsets, event, f, *, max_objects: int):
    """``(objects (N,), events (E,))`` of the pass table ``f`` ``(S,)`` (the count
    states ``0 .. S - 1``, the top one absorbing), without the NaN of a threshold above
    its cap: the recursion over the blocks' dense ``(M, block)`` tables. Elements
    beyond ``offsets[-1]`` (padding) get weight 0; so do the empty slots of each
    block's table (``q = 0``: they never pass, the engine's pattern 0), and the events
    that pad the last block (no objects).
    """
    n_events, n_values, m_slots = offsets.shape[0] - 1, values.shape[0], max_objects
    cap = f.shape[0] - 1
    block = event_block(n_events, m_slots * (cap + 1))
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
        q = jnp.where(valid, values[jnp.where(valid, st[None, :] + pos, 0)], 0.0)

        def forward(prev, p):
            return _forward_step(prev, p, cap), jnp.stack(prev)

        start = tuple(jnp.full((block,), 1.0 if k == 0 else 0.0) for k in range(cap + 1))
        _, before = jax.lax.scan(forward, start, q)  # (M, S, block): F_j

        def backward(g, x):  # G_{j+1} -> G_j, and w_j from F_j and G_{j+1}
            p, fj = x
            up = [g[min(k + 1, cap)] for k in range(cap + 1)]
            inner = sum(fj[k] * up[k] for k in range(cap + 1))
            return tuple((1.0 - p) * g[k] + p * up[k] for k in range(cap + 1)), p * inner

        g_end = tuple(jnp.full((block,), 1.0) * f[k] for k in range(cap + 1))
        g, dense = jax.lax.scan(backward, g_end, (q, before), reverse=True)  # (M, block)
        return None, (dense, g[0])

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
