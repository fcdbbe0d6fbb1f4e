"""Lorentz vectors in JAX with ``vector``'s formulas (pure maths: no files, no awkward).

A :class:`P4` is a pytree ``(pt, eta, phi, mass)`` of float64 arrays of one shape
(``vector``'s ``Momentum4D`` in rho-phi-eta-tau coordinates, as NanoAOD stores
objects). Every function is elementwise and broadcasts; empty arrays give empty arrays.

Formulas (``vector._compute``, rho-phi-eta-tau in, rho-phi-eta-tau out, so that a sum
of NanoAOD objects is computed along exactly the same path as
``vector.register_awkward()`` + ``Momentum4D``):

- sum ``a + b``: ``u = rho_b cos(phi_b - phi_a)``, ``v = rho_b sin(phi_b - phi_a)``,
  ``rho = sqrt((rho_a + u)^2 + v^2)``, ``phi = rect(phi_a + atan2(v, rho_a + u))``,
  ``z_i = rho_i sinh(eta_i)``, ``eta = asinh((z_a + z_b) / rho)``,
  ``t_i = sqrt(max(sign(tau_i) tau_i^2 + |p_i|^2, 0))`` with
  ``|p|^2 = rho^2 (cosh eta)^2`` written as ``rho^2 ((1 + e^{-2 eta}) / (2 e^{-eta}))^2``,
  ``tau = sign(m2) sqrt(|m2|)`` with ``m2 = (t_a + t_b)^2 - |p|^2``;
  three or more vectors are summed left to right, ``(a + b) + c``, as awkward does.
- ``delta_phi(a, b) = rect(phi_a - phi_b)``, ``rect(x) = (x + pi) mod 2 pi - pi``;
  ``delta_r(a, b) = sqrt(delta_phi^2 + (eta_a - eta_b)^2)``.

Undefined points follow ``vector`` in value and have zero (finite) gradient, never NaN:
``rho = 0`` gives ``eta = 0`` if ``z = 0`` else ``+-inf``; ``sqrt`` at 0 (massless sum,
``rho = 0``, ``delta_r = 0``) has zero gradient; ``atan2(0, 0) = 0``.

Cost: a few dozen flops per pair; no caps.
"""

from __future__ import annotations

import jax.numpy as jnp

from analysis.select.p4 import P4

__all__ = ["P4", "add", "delta_phi", "delta_r", "total"]


def _safe_sqrt(x):
    """``sqrt(x)`` for ``x >= 0`` with gradient 0 (not inf) at ``x = 0``."""
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def _rectify(phi):
    return (phi + jnp.pi) % (2 * jnp.pi) - jnp.pi


def _atan2(y, x):
    """``arctan2`` with value 0 and zero gradient at ``(0, 0)``."""
    origin = (x == 0) & (y == 0)
    return jnp.where(origin, 0.0, jnp.arctan2(y, jnp.where(origin, 1.0, x)))


def _eta_from_z(rho, z):
    """``asinh(z / rho)``; at ``rho = 0``: 0 if ``z = 0`` else ``sign(z) inf`` (vector)."""
    pos = rho > 0
    eta = jnp.arcsinh(z / jnp.where(pos, rho, 1.0))
    return jnp.where(pos, eta, jnp.where(z == 0, 0.0, jnp.sign(z) * jnp.inf))


def _mag2(rho, eta):
    expmeta = jnp.exp(-eta)
    invsintheta = 0.5 * (1 + expmeta**2) / expmeta
    return rho**2 * invsintheta**2


def _t(v: P4):
    tau2 = jnp.copysign(v.mass**2, v.mass)
    return _safe_sqrt(jnp.maximum(tau2 + _mag2(v.pt, v.eta), 0.0))


def add(a: P4, b: P4) -> P4:
    """``a + b`` with ``vector``'s rho-phi-eta-tau formulas (module docstring)."""
    diff = b.phi - a.phi
    u = b.pt * jnp.cos(diff)
    v = b.pt * jnp.sin(diff)
    rho = _safe_sqrt((a.pt + u) ** 2 + v**2)
    phi = _rectify(a.phi + _atan2(v, a.pt + u))
    z = a.pt * jnp.sinh(a.eta) + b.pt * jnp.sinh(b.eta)
    eta = _eta_from_z(rho, z)
    t = _t(a) + _t(b)
    m2 = t**2 - _mag2(rho, eta)
    mass = jnp.copysign(_safe_sqrt(jnp.abs(m2)), m2)
    return P4(rho, eta, phi, mass)


def total(*vectors: P4) -> P4:
    """Sum of one or more vectors, left to right (``((v0 + v1) + v2) ...``);
    one vector is returned unchanged."""
    if not vectors:
        raise ValueError("total() needs at least one vector")
    out = vectors[0]
    for v in vectors[1:]:
        out = add(out, v)
    return out


def delta_phi(a: P4, b: P4):
    """``phi_a - phi_b`` in ``[-pi, pi)``."""
    return _rectify(a.phi - b.phi)


def delta_r(a: P4, b: P4):
    """``sqrt(delta_phi(a, b)^2 + (eta_a - eta_b)^2)`` (gradient 0 where it is 0)."""
    return _safe_sqrt(delta_phi(a, b) ** 2 + (a.eta - b.eta) ** 2)
