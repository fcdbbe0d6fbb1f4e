"""Pure-Python facts of the maths layer that the config loader checks, without JAX.

:mod:`analysis.spec.statistics` (the one registry of statistics),
:mod:`analysis.spec.edges` (histogram bin edges),
:mod:`analysis.spec.activations` (the MLP's activation names). Importing this package,
like the config loader, loads none of JAX, awkward, numba, equinox, coffea or
matplotlib (tests/config/test_light.py), so a config is refused at once.
"""

from __future__ import annotations

__all__: list[str] = []
