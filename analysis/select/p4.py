"""The Lorentz vector type of :mod:`analysis.select.fourvec`, without its maths.

Pure Python (no JAX at import), so that the expression registry
(:mod:`analysis.select.functions`) and the config checks know the four fields without
loading JAX; :class:`analysis.select.fourvec.P4` is this class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import jax.numpy as jnp

__all__ = ["P4"]


class P4(NamedTuple):
    """A Lorentz vector ``(pt, eta, phi, mass)``: ``vector``'s ``Momentum4D`` with
    ``rho = pt`` and ``tau = mass`` (a negative mass is spacelike, as in ``vector``)."""

    pt: jnp.ndarray
    eta: jnp.ndarray
    phi: jnp.ndarray
    mass: jnp.ndarray
