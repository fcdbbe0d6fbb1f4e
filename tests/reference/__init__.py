"""Independent references shared by the tests (numpy only; nothing of ``analysis``).

- :mod:`tests.reference.enumeration`: the one enumeration oracle of soft selections.
  Every soft state is the exact expectation of the hard-cut state under independent
  object passes, so it is checked against the sum over every pass/fail configuration
  of the independent bits, weighted by its probability: :func:`configurations` (the
  configurations and their probabilities), :func:`members` (set memberships with
  parents), :func:`ranked` (the object holding rank ``r`` among the members).
- :mod:`tests.reference.softbins`: the soft-bin probabilities of issue 50 as written,
  :func:`soft_bins`.
- :mod:`tests.reference.states`: the one state flattener, :func:`flatten` (nested
  dicts and named-tuple states to ``path -> leaf``).
"""

from __future__ import annotations

from tests.reference.enumeration import configurations, members, ranked
from tests.reference.softbins import soft_bins
from tests.reference.states import flatten

__all__ = ["configurations", "flatten", "members", "ranked", "soft_bins"]
