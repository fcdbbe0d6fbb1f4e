"""A deterministic per-event number in [0, 1): the validation split's key.

Every event gets ``u = H(run, luminosityBlock, event) / 2**64`` (``H``: the splitmix64
finaliser applied in turn to each identifier, 64-bit wrapping arithmetic), or, where
the file has no such branches, ``u = H(hash of the file's UUID, entry number in the
file)``. ``u`` depends on the event only: the same for every chunking, executor and
run. The validation split holds out the events with ``u < fraction``
(:func:`part_factor`); the Poisson bootstrap draws each event's multiplicity in
replica ``k`` from ``H(u's bits, k)`` (:func:`poisson_replicas`), so replicas too are
the same for every chunking and executor.

Empty input: empty arrays.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import numpy as np

__all__ = ["PARTS", "entry_uniform", "event_uniform", "part_factor", "poisson_replicas"]

#: which events a pass weighs: all, the training part, the held-out part
PARTS = ("all", "train", "held_out")

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of ``x + golden`` (uint64, wrapping)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _uniform(h: np.ndarray) -> np.ndarray:
    """The top 53 bits of ``h`` as a float64 in [0, 1)."""
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def event_uniform(run, lumi, event) -> np.ndarray:
    """``u`` of events identified by ``(run, luminosityBlock, event)`` (integer arrays)."""
    h = _mix(np.asarray(run).astype(np.uint64))
    h = _mix(h ^ np.asarray(lumi).astype(np.uint64))
    h = _mix(h ^ np.asarray(event).astype(np.uint64))
    return _uniform(h)


def entry_uniform(file_id: str, entries) -> np.ndarray:
    """``u`` of the entries ``entries`` (entry numbers in the file) of the file ``file_id``
    (its UUID, else its name): for files without run/luminosityBlock/event."""
    seed = int.from_bytes(hashlib.blake2b(file_id.encode(), digest_size=8).digest(), "little")
    h = _mix(np.full(len(entries), seed, dtype=np.uint64))
    return _uniform(_mix(h ^ np.asarray(entries).astype(np.uint64)))


def part_factor(
    u: np.ndarray, part: Literal["all", "train", "held_out"], fraction: float
) -> np.ndarray:
    """Per-event weight factor of ``part``: held out are the events with ``u < fraction``,
    weighted ``1 / fraction``; training the others, weighted ``1 / (1 - fraction)``
    (so each part estimates the full sample's sums); ``all``: ones."""
    u = np.asarray(u, dtype=np.float64)
    if part == "all" or fraction <= 0.0:
        return np.ones_like(u)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    held = u < fraction
    if part == "held_out":
        return np.where(held, 1.0 / fraction, 0.0)
    if part == "train":
        return np.where(held, 0.0, 1.0 / (1.0 - fraction))
    raise ValueError(f"part must be one of {PARTS}, got {part!r}")


# P(N <= n) of a Poisson(1) variable, n = 0..11 (P(N > 11) ~ 1e-9: drawn as 12)
_POISSON1_CDF = np.cumsum([np.exp(-1.0) / float(np.prod(np.arange(1, n + 1))) for n in range(12)])
_REPLICA = np.uint64(0xD1B54A32D192ED03)


def poisson_replicas(u: np.ndarray, replicas: int) -> np.ndarray:
    """``(E, replicas)`` uint8: each event's multiplicity in each bootstrap replica, a
    Poisson(1) draw by inversion of ``H(bits of u, k)`` (deterministic per event and
    replica). Empty input: shape ``(0, replicas)``."""
    h = (np.asarray(u, dtype=np.float64) * 2.0**53).astype(np.uint64)
    k = (np.arange(1, replicas + 1, dtype=np.uint64) * _REPLICA)[None, :]
    with np.errstate(over="ignore"):
        v = _uniform(_mix(h[:, None] ^ k))
    return np.searchsorted(_POISSON1_CDF, v, side="right").astype(np.uint8)
