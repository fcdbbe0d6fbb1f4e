"""analysis.allocator: freed large blocks stay in the C heap (no page faults on reuse)."""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import sys

import pytest

from analysis import allocator

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
