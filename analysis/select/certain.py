"""Which objects an event-sum histogram enumerates: the one definition of "uncertain".

The histogram of ``X = sum_{j in S} f_j`` enumerates the subsets of an event's
*uncertain* objects of ``S``'s collection; every other object is folded into the count
distribution by one step (exact for any probabilities) and, where it is in ``S`` for
certain, adds its value to every subset's sum. From an object's pattern probabilities
``raw`` (per-object factors left out; :mod:`analysis.select.countmodel`'s patterns of set
memberships) it is **certain** when

- one pattern has probability exactly 1 in float64 (a width-0 cut, a saturated sigmoid);
  it is in ``S`` when the patterns holding ``S`` sum to exactly 1; or
- its membership in ``S`` is decided: every pattern holding ``S`` is exactly 0 (out of
  ``S``), or every pattern without ``S`` is (in ``S``), whatever its other sets (a jet far
  above the soft pT cut whose b-tag is uncertain: in ``jets`` for certain).

A probability of exactly 0 carries a zero derivative (a width-0 step has no slope, a
saturated sigmoid's slope ``s (1 - s) / w`` is 0, and so is a product with such a
factor), so folding a decided object loses no derivative. An object with a NaN
probability is uncertain (its event's bins are NaN in any case).

Both kernels count and fold with :func:`certain_objects` (the JAX one,
:func:`analysis.select.subsets.sum_bins`, on traced arrays; the numba one,
:mod:`analysis.pipeline.backends.numba.fasthist`, on the host before its event-sum
kernel), so the ``--debug`` counts and the limit of 24 uncertain objects are the same on
both backends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["certain_objects"]


def certain_objects(raw: Any, has: Any, xp: Any = np) -> tuple[Any, Any]:
    """``(certain, inside)``, bool arrays of ``raw``'s shape without its last axis:
    whether each object is certain (module docstring) and, where it is, whether it is in
    ``S``. ``raw``: ``(..., P)`` pattern probabilities (float64, per-object factors left
    out); ``has``: ``(P,)`` bool, whether pattern ``p`` holds ``S``; ``xp``: the array
    module (``numpy``, or ``jax.numpy`` on traced arrays)."""
    has = np.asarray(has, dtype=bool)
    # one pattern at a time (a handful): element-wise steps over the objects, several
    # times faster in numpy than reductions along a short last axis
    one = in_s = out_s = s_in = None
    for p, holds in enumerate(has.tolist()):
        r = raw[..., p]
        zero = r == 0.0
        one = (r == 1.0) if one is None else one | (r == 1.0)
        if holds:  # summed in pattern order (the numba kernel's former order)
            s_in = r if s_in is None else s_in + r
            out_s = zero if out_s is None else out_s & zero
        else:
            in_s = zero if in_s is None else in_s & zero
    shape = raw.shape[:-1]
    in_s = xp.ones(shape, dtype=bool) if in_s is None else in_s
    out_s = xp.ones(shape, dtype=bool) if out_s is None else out_s
    s_in = xp.zeros(shape) if s_in is None else s_in
    certain = one | in_s | out_s
    inside = xp.where(one, s_in == 1.0, in_s)
    return certain, inside
