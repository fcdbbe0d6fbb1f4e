"""The optimiser's coordinates of trainable bin edges: ordered by construction.

A histogram with ``trainable_edges: true`` and ``n`` bins between the fixed outer edges
``lo`` and ``hi`` has ``n - 1`` edge parameters ``NAME.edges[i]``. The optimiser does not
move them directly: it moves ``n - 1`` unconstrained logits ``l_1..l_{n-1}`` (with
``l_0 = 0``), and the bin widths are the softmax of the logits times ``hi - lo``:

    width_j = (hi - lo) softmax(l)_j,    e_i = lo + sum_{j < i} width_j

so every width is strictly positive and the edges are strictly increasing inside
``(lo, hi)`` for any logits (an update cannot swap two edges or push one out; projection
could only clip them onto each other). The map is one-to-one: ``l_j = log(width_j /
width_0)``; the logits are clipped to ``[-10, 10]`` after each update
(:data:`LOGIT_MAX`: no bin narrower than ~1e-9 of the range, so no two edges round to
one float64). Gradients (and a Newton step's Hessian) are carried to the logits by the
chain rule (:meth:`EdgeCoordinates.chain`, exact: the map's Jacobian and Hessian by
JAX). Every other parameter keeps :class:`analysis.optimize.loop.Coordinates`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["LOGIT_MAX", "EdgeCoordinates", "edge_groups", "with_edges"]

#: the logits' bound (after each update): two bins' widths differ by at most
#: ``exp(2 LOGIT_MAX)`` (5e8), so the narrowest bin keeps ~1e-9 of the range, far above
#: float64's resolution of the edges, which stay strictly increasing whatever the step
#: (with a bound of 30 a huge step made the last edges equal to the outer one in float64)
LOGIT_MAX = 10.0


def edge_groups(config: Any, names: tuple[str, ...]) -> list[tuple[list[int], float, float]]:
    """``[(indices into names, lo, hi)]`` of each histogram's trainable edges."""
    out = []
    for h in config.histograms:
        if h.trainable_edges:
            e = h.bin_edges()
            out.append(([names.index(n) for n in h.edge_names()], e[0], e[-1]))
    return out


def _edges(logits: Any, lo: float, hi: float) -> Any:
    """Interior edges of the logits (module docstring)."""
    w = jax.nn.softmax(jnp.concatenate([jnp.zeros(1), logits])) * (hi - lo)
    return lo + jnp.cumsum(w)[:-1]


def _logits(edges: Any, lo: float, hi: float) -> np.ndarray:
    w = np.diff(np.concatenate([[lo], np.asarray(edges, dtype=np.float64), [hi]]))
    return np.log(w[1:] / w[0])


class EdgeCoordinates:
    """:class:`analysis.optimize.loop.Coordinates` with trainable edges in logits.

    Parameters
    ----------
    base : Coordinates
        The coordinates of every parameter (the edges' entries are made unbounded
        there: the logits are neither scaled nor clipped).
    groups : list
        :func:`edge_groups`.
    """

    def __init__(self, base: Any, groups: list[tuple[list[int], float, float]]) -> None:
        self.base = base
        self.groups = groups
        for idx, _, _ in groups:
            base.bounded[idx] = False
            base.lower[idx], base.upper[idx], base.scale[idx] = 0.0, 1.0, 1.0
        self.names = base.names
        self.bounded, self.lower, self.upper = base.bounded, base.lower, base.upper
        self.scale = base.scale

    def clip(self, u: Any) -> np.ndarray:
        """``u`` clipped where bounded, the logits to ``[-LOGIT_MAX, LOGIT_MAX]``."""
        u = np.array(self.base.clip(u), dtype=np.float64)
        for idx, _, _ in self.groups:
            u[idx] = np.clip(u[idx], -LOGIT_MAX, LOGIT_MAX)
        return u

    def to_u(self, theta: Any) -> np.ndarray:
        """Coordinates of parameter values: the edges' logits in their entries."""
        theta = np.asarray(theta, dtype=np.float64)
        u = np.array(self.base.to_u(theta), dtype=np.float64)
        for idx, lo, hi in self.groups:
            u[idx] = _logits(theta[idx], lo, hi)
        return u

    def to_theta(self, u: Any) -> np.ndarray:
        """Parameter values of coordinates: the edges from their logits."""
        u = np.asarray(u, dtype=np.float64)
        theta = np.array(self.base.to_theta(u), dtype=np.float64)
        for idx, lo, hi in self.groups:
            theta[idx] = np.asarray(_edges(jnp.asarray(u[idx]), lo, hi))
        return theta

    def chain(self, u: Any, grad: Any, hess: Any = None) -> tuple[np.ndarray, Any]:
        """The gradient (and Hessian) of the objective in the coordinates at ``u`` from
        those in the parameters: ``J^T g`` and ``J^T H J + sum_k g_k d2theta_k/du2``."""
        u = jnp.asarray(u, dtype=jnp.float64)

        def theta(v):
            t = self.base.lower + v * self.base.scale
            for idx, lo, hi in self.groups:
                t = t.at[jnp.asarray(idx)].set(_edges(v[jnp.asarray(idx)], lo, hi))
            return t

        g = jnp.asarray(grad, dtype=jnp.float64)
        jac = jax.jacfwd(theta)(u)
        g_u = np.asarray(jac.T @ g)
        if hess is None:
            return g_u, None
        second = jax.hessian(lambda v: jnp.dot(g, theta(v)))(u)
        return g_u, np.asarray(jac.T @ jnp.asarray(hess) @ jac + second)


def with_edges(base: Any, config: Any) -> Any:
    """``base`` itself without trainable edges among its names, else
    :class:`EdgeCoordinates` over it."""
    groups = edge_groups(config, tuple(base.names))
    return EdgeCoordinates(base, groups) if groups else base
