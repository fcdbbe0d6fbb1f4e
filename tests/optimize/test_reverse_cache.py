"""The reverse sweep's compiled objective is keyed on everything read while tracing:
the validation split changes ``variance_scale`` between parts whose dataset totals may
be equal, and the compiled function must follow it."""

from __future__ import annotations

import numpy as np

from analysis.optimize.reverse import _cotangent


class _Objective:
    """The part of :class:`analysis.optimize.objectives.Objective` that ``_cotangent`` reads."""

    terms: tuple = ()

    def __init__(self) -> None:
        self.variance_scale = 1.0

    def stats(self, values, sumw, events):
        return {"v": self.variance_scale * values["tt"] ** 2}

    def value(self, stats):
        return stats["v"]


def test_a_new_variance_scale_compiles_again() -> None:
    objective, sumw, events = _Objective(), {"tt": 2.0}, {"tt": 10}
    values = {"tt": np.float64(3.0)}
    (val, _), grad = _cotangent(objective, sumw, events)(values)
    assert float(val) == 9.0 and float(grad["tt"]) == 6.0
    objective.variance_scale = 0.25  # the held-out part, same totals
    (val, _), grad = _cotangent(objective, sumw, events)(values)
    np.testing.assert_allclose([float(val), float(grad["tt"])], [2.25, 1.5], rtol=1e-15)
