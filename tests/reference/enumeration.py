"""The one enumeration oracle: every pass/fail configuration of independent bits.

A soft selection gives each object and cut (or set) a pass probability ``q``; the
soft state is the expectation of the hard-cut state when the bits pass independently.
The oracle lists all ``2^n`` configurations of ``n`` bits with their probabilities, so
a test builds the hard-cut state of each configuration with plain numpy (or awkward,
vector) and sums them with the weights: no formula of the code under test is used.
Keep ``n`` small (``2^n`` rows; 12 bits is 4096).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["configurations", "members", "ranked"]


def configurations(q: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(conf, prob)`` of ``n = len(q)`` independent bits passing with probabilities
    ``q``: ``conf`` ``(2^n, n)`` bool (rows in ``itertools.product`` order, all-fail
    first), ``prob`` ``(2^n,)`` = ``prod_i (q_i if conf_i else 1 - q_i)``, summing to 1.
    No bits: one configuration of probability 1. ``prob`` has ``q``'s float dtype (at
    least float64: a long-double ``q`` gives long-double probabilities)."""
    q = np.asarray(q)
    q = q.astype(np.result_type(q.dtype, np.float64)).reshape(-1)
    n = len(q)
    # row i, bit j = bit n-1-j of i: itertools.product's order, without its 2^n tuples
    rows = np.arange(2**n, dtype=np.int64)[:, None]
    conf = ((rows >> np.arange(n - 1, -1, -1, dtype=np.int64)) & 1).astype(bool)
    return conf, np.where(conf, q, 1.0 - q).prod(axis=1)


def members(
    own: Mapping[str, Sequence[float] | np.ndarray], parents: Mapping[str, str | None] | None = None
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Set memberships over all configurations of the sets' own bits.

    ``own[name]``: the own pass probability of each object of the set (one independent
    bit per object and set; a derived set's bit exists even where the parent fails, it
    just does not matter there). ``parents[name]``: the set it is derived from (``None``
    or missing: a root). Returns ``({name: (2^n, m_name) bool}, prob)``: an object is in
    a set when its own bit and its parent's membership hold."""
    parents = parents or {}
    names = list(own)
    sizes = [len(np.asarray(own[n]).reshape(-1)) for n in names]
    conf, prob = configurations(np.concatenate(
        [np.asarray(own[n], dtype=np.float64).reshape(-1) for n in names] or [np.zeros(0)]))
    start = np.cumsum([0] + sizes)
    bits = {n: conf[:, start[i] : start[i + 1]] for i, n in enumerate(names)}
    out: dict[str, np.ndarray] = {}

    def member(name: str) -> np.ndarray:
        if name not in out:
            parent = parents.get(name)
            out[name] = bits[name] & (member(parent) if parent is not None else True)
        return out[name]

    for name in names:
        member(name)
    return out, prob


def ranked(member: np.ndarray, rank: Sequence[float] | np.ndarray, r: int) -> np.ndarray:
    """Per configuration, the object holding rank ``r`` (0: the first) among the members
    of ``member`` ``(rows, m)``, objects ordered by ``rank`` descending (ties keep their
    order: a stable sort); ``-1`` where fewer than ``r + 1`` objects are members."""
    rank = np.asarray(rank).reshape(-1)
    m = len(rank)
    if m == 0:
        return np.full(len(member), -1)
    order = sorted(range(m), key=lambda j: -rank[j])
    ordered = member[:, order]
    hit = ordered & (np.cumsum(ordered, axis=1) == r + 1)
    return np.where(hit.any(axis=1), np.asarray(order)[np.argmax(hit, axis=1)], -1)
