"""``mass``, ``pt``, ``eta``, ``phi`` of a sum of objects: ``mass(jets[0] + jets[1])``.

The 4-vector sum with ``vector``'s formulas, left to right
(:func:`analysis.select.fourvec.total`), then its component; one object alone is
itself (``pt(jets[0])`` is ``jets[0].pt``).
"""

from __future__ import annotations

from typing import Any

from analysis.select.p4 import P4

__all__ = ["Eta", "Mass", "Phi", "Pt"]


class _Component:
    """A component of the (summed) 4-vector of the one argument."""

    name = ""
    arity = 1
    fields = P4._fields
    sums = True

    def value(self, v: Any) -> Any:
        return getattr(v, self.name)


class Mass(_Component):
    name = "mass"


class Pt(_Component):
    name = "pt"


class Eta(_Component):
    name = "eta"


class Phi(_Component):
    name = "phi"
