"""``mt(a, b)``: the transverse mass of two objects, ``mt(muons[0], MET)``.

``mT = sqrt(2 pT_a pT_b (1 - cos(phi_a - phi_b)))`` (massless transverse momenta; for
a lepton and the missing transverse momentum, the W transverse mass). Reads ``pt`` and
``phi`` of each argument: an indexed object or a per-event object such as ``MET``
(the branches ``MET.pt``, ``MET.phi``). Float64; 0 where the two are collinear, with
zero (finite) gradient there.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TransverseMass"]


class TransverseMass:
    name = "mt"
    arity = 2
    fields = ("pt", "phi")
    sums = False

    def value(self, a: Any, b: Any) -> Any:
        import jax.numpy as jnp  # here: the registry is read without JAX (config checks)

        m2 = 2.0 * a.pt * b.pt * (1.0 - jnp.cos(a.phi - b.phi))
        pos = m2 > 0
        return jnp.where(pos, jnp.sqrt(jnp.where(pos, m2, 1.0)), 0.0)
