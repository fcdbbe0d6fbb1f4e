"""The compile-time choice of a lane primitive's implementation (analysis.select.lanes.policy.specialise_on).

A primitive made from a stub and its implementations per kind of one argument: the
first case whose test holds for that argument's numba type, else the last
implementation; the stub's name, docstring and signature kept; outside numba it raises.
"""

from __future__ import annotations

import inspect

import numba
import numpy as np
import pytest
from numba import types

from analysis.select.lanes.policy import specialise_on


def _two_d(t) -> bool:
    return isinstance(t, types.Array) and t.ndim == 2


def _row_total(x, scale):
    s = 0.0
    for r in range(x.shape[0]):
        s += x[r]
    return scale * s


@specialise_on("x", (_two_d, lambda x, scale: scale * x.sum() + 1000.0),
               (lambda t: isinstance(t, types.Array), _row_total),
               lambda x, scale: scale * x)
def total(x, scale):
    """``scale`` times the lanes' sum of ``x`` (a 2-D array: + 1000), or of a number."""


@numba.njit
def _call(x, scale):
    return total(x, scale)


def test_the_case_is_chosen_by_the_argument_type_first_match_first():
    lanes = np.arange(4.0)
    assert _call(lanes, 2.0) == 12.0  # a 1-D array: the second case
    assert _call(3.0, 2.0) == 6.0  # a number: the last implementation
    assert _call(np.ones((2, 3)), 1.0) == 1006.0  # 2-D: the first case, before the second


def test_the_stub_keeps_its_name_doc_and_signature_and_raises_outside_numba():
    assert total.__name__ == "total"
    assert total.__doc__.startswith("``scale`` times")
    assert list(inspect.signature(total).parameters) == ["x", "scale"]
    with pytest.raises(NotImplementedError, match="compiled only"):
        total(1.0, 2.0)
