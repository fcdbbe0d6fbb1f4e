"""scripts/check_states.py's ``compare`` on tiny hand-made dumps: bit for bit where equal,
the relative difference against the reference leaf's largest value, NaN equal to NaN at
the same place only, missing leaves and one-sided failures reported, exit 1 beyond ``tol``.
"""

from __future__ import annotations

import math

import numpy as np

from tests.conftest import REPO, load_script

check_states = load_script(REPO / "scripts" / "check_states.py")

_JAC = "cfg/1/ttbar/jac['observables']['jet_pt']['moments'].m2"
_VAL = "cfg/1/dy/value['selected_sumw']"


def _dump(**leaves) -> dict:
    base = {_JAC: np.array([4.0, -2.0]), _VAL: np.array(3.0), "cfg/reverse/auto/grad": np.ones(2)}
    base.update(leaves)
    return {"leaves": base, "failed": {}}


def _run(a: dict, b: dict, tol: float = 1e-14, verbose: bool = True) -> tuple[int, str]:
    lines: list[str] = []
    rc = check_states.compare(a, b, tol=tol, write=lines.append, verbose=verbose)
    return rc, "\n".join(lines)


def test_equal_dumps_are_bit_for_bit():
    rc, text = _run(_dump(), _dump())
    assert rc == 0
    assert "jac[observables][*][moments] (1 leaves): bit for bit" in text
    assert text.endswith("max relative difference 0.000e+00; same")
    assert "cfg/1: bit for bit (2 families, 2 leaves)" in _run(_dump(), _dump(), verbose=False)[1]


def test_a_difference_is_relative_to_the_leafs_largest_value():
    rc, text = _run(_dump(), _dump(**{_JAC: np.array([4.0, -2.0 + 4e-12])}))
    assert rc == 1 and "1.000e-12" in text and _JAC in text
    assert _run(_dump(), _dump(**{_JAC: np.array([4.0, -2.0 + 4e-12])}), tol=1e-11)[0] == 0


def test_nan_equals_nan_at_the_same_place_only():
    nan = np.array([np.nan, 1.0])
    assert check_states.relative_difference(nan, nan.copy()) == 0.0
    assert check_states.relative_difference(nan, np.array([1.0, np.nan])) == math.inf
    assert check_states.relative_difference(np.zeros(2), np.zeros(3)) == math.inf
    assert check_states.relative_difference(np.zeros(2), np.array([0.0, 1e-300])) == 1e-300


def test_missing_leaves_and_one_sided_failures_fail():
    b = _dump()
    del b["leaves"][_VAL]
    b["failed"]["cfg/1"] = "MemoryError: out of memory"
    rc, text = _run(_dump(), b)
    assert rc == 1
    assert f"1 leaves only in A:\n  {_VAL}" in text
    assert "failed cfg/1: A: ran | B: MemoryError: out of memory" in text


def test_a_dump_of_some_configs_and_passes_compares_those_of_both():
    a = _dump(**{"other/0/ttbar/sumw": np.array(1.0)})
    b = _dump()
    del b["leaves"]["cfg/reverse/auto/grad"]
    rc, text = _run(a, b)
    assert rc == 0
    assert text.startswith("not compared, only in A: cfg/reverse, other/0\ncfg/1\n")
    b["failed"]["other"] = "ConfigError: a config that failed as a whole"
    rc, text = _run(a, b)
    assert rc == 1 and "failed other: A: ran | B: ConfigError" in text
