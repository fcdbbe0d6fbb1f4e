"""The lane primitives' implementations (:func:`analysis.select.lanes.policy.specialise`)
keep no numba cache files: numba compiles each alone to type it, but that machine code
never runs (a caller inlines the implementation's IR afresh), and its cache would be
keyed by the implementation's file alone and read unchecked (a spoilt file failed every
later caller's compilation: a pickle cut short raised in numba's index reader).

A new process with its own ``NUMBA_CACHE_DIR`` compiles an uncached caller of a
primitive in its two kinds (values, a number; tangents, an array of lanes); every file it
left there is then cut short, and a second process compiles the caller again: the same
results (the reference: the primitive's documented arithmetic)."""

from __future__ import annotations

from tests.conftest import numba_child

CHILD = """
import json
import numba, numpy as np
from analysis.select.lanes import arith

@numba.njit(cache=False)
def values(x, y):
    acc = 0.0
    for i in range(x.shape[0]):
        acc = arith.dot_add(acc, x[i], y[i], 4)
    return acc

@numba.njit(cache=False)
def lanes(x, y):
    acc = (0.0,) * 8
    for i in range(x.shape[0]):
        acc = arith.dot_add(acc, x[i], y[i], 4)
    return acc

x = np.arange(3.0)
y = np.arange(24.0).reshape(3, 8) / 8
print(json.dumps({"values": values(x, x + 1.0), "lanes": list(lanes(y, y[::-1].copy()))}))
"""


def test_a_spoilt_cache_directory_does_not_break_a_callers_compilation(tmp_path):
    first = numba_child(CHILD, tmp_path)
    # the reference: sum x (x + 1) = 0 + 2 + 6; per lane r < 4: sum (y_0 x_r + x_0 y_r)
    # of x = y[i], y = y[2 - i] (lanes 4-7: y_4, x_4)
    y = [[(8 * i + r) / 8 for r in range(8)] for i in range(3)]
    want = [sum(y[2 - i][4 * (r // 4)] * y[i][r] + y[i][4 * (r // 4)] * y[2 - i][r]
                for i in range(3)) for r in range(8)]
    assert first == {"values": 8.0, "lanes": want}
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p.name for p in files if "arith" in p.name]  # the implementations: none
    for path in files:  # whatever is there, cut short
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert numba_child(CHILD, tmp_path) == first
