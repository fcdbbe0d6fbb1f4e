"""analysis.runtime.allocator: freed large blocks stay in the C heap (no page faults on reuse)."""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import sys

import pytest

from analysis.runtime import allocator

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None,
    reason="glibc's mallopt",
)


def _faults_of_reuse(nbytes: int, times: int) -> int:
    """Minor page faults of ``malloc``, touching and ``free`` of ``nbytes``, ``times``
    times after one warm-up round (the C library's calls, as XLA's CPU runtime makes
    them; numpy's large arrays would use huge pages)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)

    def once() -> None:
        ptr = libc.malloc(nbytes)
        assert ptr
        ctypes.memset(ptr, 1, nbytes)
        libc.free(ptr)

    once()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(times):
        once()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@glibc
def test_freed_blocks_are_reused_without_faults():
    assert allocator.keep_freed_buffers() is True
    # 48 MiB: above glibc's largest dynamic mmap threshold (32 MiB), so without the
    # setting every allocation is a fresh mapping (12,288 pages faulted in each time)
    faults = _faults_of_reuse(48 << 20, 5)
    assert faults < 2000, faults


def test_off_by_environment(monkeypatch):
    monkeypatch.setenv(allocator.ENV, "off")
    assert allocator.keep_freed_buffers() is False


@pytest.mark.parametrize("bad", [0, -1, 2**31, 1.5, True, "1"])
def test_bad_limit(bad):
    with pytest.raises(ValueError, match="limit"):
        allocator.keep_freed_buffers(bad)


_DERIVE_ONCE = """
import gc
import numpy as np
from analysis import stats
from analysis.soft import soft_cut

def make(pt):
    def fn(theta):
        return {"m": stats.moments(pt, weight=soft_cut(pt, ">", theta["c"], 5.0))}
    return fn

pt = stats.Jagged(np.array([10.0, 40.0, 25.0, 60.0]), np.array([0, 2, 2, 4]))
before = gc.get_freeze_count()
stats.derive(make(pt), {"c": 30.0})
print(before, gc.get_freeze_count())
"""


@pytest.mark.parametrize("setting", ["", "off"])
def test_derive_freezes_startup_objects_once(setting):
    # a fresh process: the first compiled chunk freezes what the imports made
    import os
    import subprocess
    from pathlib import Path

    env = {**os.environ, allocator.GC_ENV: setting, "JAX_ENABLE_X64": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", _DERIVE_ONCE], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    before, after = int(out[-2]), int(out[-1])
    assert before == 0
    if setting == "off":
        assert after == 0
    else:
        # the imported libraries' objects (JAX, numba, this package): many thousands
        assert after > 50_000, after


def test_freeze_off_by_environment(monkeypatch):
    import gc

    monkeypatch.setenv(allocator.GC_ENV, "off")
    count = gc.get_freeze_count()
    assert allocator.freeze_startup_objects() is False
    assert gc.get_freeze_count() == count
