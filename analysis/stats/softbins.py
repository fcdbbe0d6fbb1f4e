"""Soft bins: the probability of each bin of an entry at ``x`` under logistic noise.

An entry at ``x`` lands in bin ``[e_k, e_{k+1})`` with probability

    P_k(x) = sigmoid((e_{k+1} - x) / W) - sigmoid((e_k - x) / W)

the exact expectation of the hard bin of ``x + eps`` with ``eps`` logistic of scale
``W`` (the noise a soft cut of width ``W`` means: ``P(x + eps > t) = sigmoid((x - t) /
W)``). The underflow bin takes ``sigmoid((e_0 - x) / W)``, the overflow
``sigmoid((x - e_n) / W)``: the ``n + 2`` probabilities sum to 1. ``W = 0`` is the hard
bin (boost-histogram's: ``[e_k, e_{k+1})``, NaN and ``+inf`` to the overflow), with zero
derivative in ``x`` and the edges. ``x``, the edges and ``W`` may be traced: their
derivatives flow through the probabilities (a learned score, a shifted field,
trainable edges).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["bin_probabilities", "is_hard"]


def is_hard(width: Any) -> bool:
    """True when ``width`` is ``None`` or a concrete 0 (the hard bins, computed as
    before soft bins existed); a traced width is never known to be 0."""
    if width is None:
        return True
    try:
        return float(width) == 0.0
    except (TypeError, jax.errors.ConcretizationTypeError):
        return False


def _hard(x: Any, edges: Any) -> Any:
    nb = edges.shape[0] + 1
    idx = jnp.searchsorted(edges, x, side="right")
    return (idx[:, None] == jnp.arange(nb)).astype(jnp.float64)


def _soft(x: Any, edges: Any, width: Any) -> Any:
    z = (edges[None, :] - x[:, None]) / width  # (N, n + 1): sigmoid(z) = P(x + eps < e)
    a, b = z[:, 1:], z[:, :-1]
    # sigmoid(a) - sigmoid(b) = sigmoid(-b) - sigmoid(-a): the form without cancellation
    # of two values near 1 where both arguments are large
    inner = jnp.where(a + b > 0, jax.nn.sigmoid(-b) - jax.nn.sigmoid(-a),
                      jax.nn.sigmoid(a) - jax.nn.sigmoid(b))
    return jnp.concatenate(
        [jax.nn.sigmoid(z[:, :1]), inner, jax.nn.sigmoid(-z[:, -1:])], axis=1)


def bin_probabilities(x: Any, edges: Any, width: Any = None) -> Any:
    """``(N, n + 2)`` float64: per entry the probability of each bin, underflow first and
    overflow last (module docstring).

    Parameters
    ----------
    x : array
        The ``N`` entries' values (1-D; may be traced).
    edges : sequence of float or array
        The ``n + 1`` strictly increasing edges (may be traced: trainable edges).
    width : float, array or None
        The logistic scale ``W >= 0`` (may be traced). ``None`` or a concrete 0: the hard
        bins exactly (one-hot rows); a traced ``W`` takes the hard rows where it is 0.

    Returns
    -------
    array
        ``(N, n + 2)`` probabilities; each row sums to 1.
    """
    x = jnp.asarray(x, dtype=jnp.float64)
    e = jnp.asarray(edges, dtype=jnp.float64)
    if is_hard(width):
        return _hard(x, e)
    w = jnp.asarray(width, dtype=jnp.float64)
    # NaN and +-inf take their hard bin (overflow, underflow: the soft limit too); a
    # finite stand-in keeps their derivatives 0, not inf * 0
    finite = jnp.isfinite(x)
    soft = _soft(jnp.where(finite, x, 0.0), e, jnp.where(w > 0, w, 1.0))
    return jnp.where((w > 0) & finite[:, None], soft, _hard(x, e))
