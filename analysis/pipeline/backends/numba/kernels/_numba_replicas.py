"""numba loops of the Poisson bootstrap: every replica's sums in one pass over the events.

The multiplicity of event ``e`` in replica ``k`` is the Poisson(1) draw of
:func:`analysis.pipeline.split.poisson_replicas` (same hash, same inversion; the tests
compare them), accumulated without materialising the ``(E, K)`` table. The inversion's
table ``cdf`` (``P(N <= n)``, ``analysis.pipeline.split._POISSON1_CDF``) is an
argument: kernels import nothing from the host.
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.policy import njit

__all__ = ["replica_lanes"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_REPLICA = np.uint64(0xD1B54A32D192ED03)


@njit
def _mix(x):
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit
def _draw(h, k, cdf):
    z = _mix(h ^ (np.uint64(k + 1) * _REPLICA))
    v = np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)
    n = 0
    while n < cdf.shape[0] and v >= cdf[n]:
        n += 1
    return n


@njit
def _lanes(bits, selected, weights, totals, cdf, replicas, out, tot):
    # every lane's [sum n s, sum n s^2] (events of s = 0 in every lane skipped: they add
    # nothing) and, with totals, [sum n, sum n w], drawing each event's multiplicities once
    lanes, rows = selected.shape[0], weights.shape[0]
    for e in range(bits.shape[0]):
        if not totals:
            used = False
            for j in range(lanes):
                if selected[j, e] != 0.0:
                    used = True
                    break
            if not used:  # adds nothing
                continue
        for k in range(replicas):
            n = _draw(bits[e], k, cdf)
            if n:
                if totals:
                    tot[0, k] += n
                    for j in range(rows):
                        tot[1 + j, k] += n * weights[j, e]
                for j in range(lanes):
                    s = selected[j, e]
                    if s != 0.0:
                        out[j, 0, k] += n * s
                        out[j, 1, k] += n * s * s

def _bits(u) -> np.ndarray:
    return (np.asarray(u, dtype=np.float64) * 2.0**53).astype(np.uint64)


def replica_lanes(
    u: np.ndarray, selected: np.ndarray, replicas: int, weights: np.ndarray | None = None, *,
    cdf: np.ndarray,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per row ``s`` of ``selected`` ``(L, E)``: ``[sum_e P_ek s_e, sum_e P_ek s_e^2]``
    (``(L, 2, replicas)``; ``P_ek`` the event's multiplicity in replica ``k``, ``s_e``
    its selected weight: weight x pass probability) and, given ``weights`` ``(M, E)``,
    ``[sum_e P_ek, sum_e P_ek w_me for each row]`` (``(1 + M, replicas)``, else None),
    from one loop over the events (each event's multiplicities drawn once; events of
    ``s_e = 0`` in every row skipped without weights). Empty input: zeros."""
    selected = np.ascontiguousarray(np.atleast_2d(selected), dtype=np.float64)
    totals = weights is not None
    w = (np.ascontiguousarray(np.atleast_2d(weights), dtype=np.float64) if totals
         else np.zeros((0, selected.shape[1])))
    out = np.zeros((selected.shape[0], 2, replicas))
    tot = np.zeros((1 + w.shape[0], replicas))
    _lanes(_bits(u), selected, w, totals, cdf, replicas, out, tot)
    return out, (tot if totals else None)
