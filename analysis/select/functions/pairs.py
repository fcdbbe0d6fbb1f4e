"""``deltaR(a, b)`` and ``deltaPhi(a, b)`` of two objects (``vector``'s formulas).

``deltaPhi = rect(phi_a - phi_b)`` in ``[-pi, pi)``; ``deltaR = sqrt(deltaPhi^2 +
(eta_a - eta_b)^2)`` (:mod:`analysis.select.fourvec`). ``deltaPhi`` reads ``phi``
only, so a per-event object works too: ``deltaPhi(jets[0], MET)``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DeltaPhi", "DeltaR"]


class DeltaR:
    name = "deltaR"
    arity = 2
    fields = ("eta", "phi")
    sums = False

    def value(self, a: Any, b: Any) -> Any:
        from analysis.select import fourvec  # here: the registry loads no JAX

        return fourvec.delta_r(a, b)


class DeltaPhi:
    name = "deltaPhi"
    arity = 2
    fields = ("phi",)
    sums = False

    def value(self, a: Any, b: Any) -> Any:
        from analysis.select import fourvec

        return fourvec.delta_phi(a, b)
