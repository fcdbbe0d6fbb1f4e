"""Process-wide memory settings for compiled chunk passes: freed large buffers kept in the C
heap, so that a compiled chunk program does not fault its memory in again on every call
(:func:`keep_freed_buffers`), and the objects of the imported libraries kept out of the
cyclic garbage collector's full collections (:func:`freeze_startup_objects`).

XLA's CPU runtime allocates a compiled program's temporaries (one block for all of
them) and its results with ``malloc`` on every call. glibc serves a block above its mmap
threshold (dynamic, at most 32 MiB) by ``mmap`` and returns it to the system on
``free``, so the next call gets fresh pages that the kernel zero-fills on first touch:
a page fault every 4 KiB. ``stats.derive``'s program for a 50k-event chunk of the
README's processor has ~38 MB of temporaries: measured 9,200-9,700 minor faults per
call, and 45-48 ms of CPU time per call that became 30-34 ms (0 faults) with the
thresholds below (2 cores, load 3-4).

:func:`keep_freed_buffers` raises glibc's mmap threshold and its trim threshold (the
free memory at the top of the heap that ``free`` keeps instead of returning it) to
``limit`` bytes (default :data:`LIMIT`, 128 MiB), through ``mallopt``: blocks up to that
size come from the heap and are reused by the next call. Cost: up to ``limit`` bytes of
freed memory per malloc arena stay mapped (resident once touched) instead of returning
to the system; blocks above ``limit`` (a large array) are still mapped and unmapped as
before. :func:`analysis.runtime.configure` calls it (the command line, the driver, every
worker's first ``stats.derive``). ``DIFFCOFFEA_MALLOC=off`` (or ``0``, ``false``, ``no``, ``none``)
leaves the allocator alone; so does a C library other than glibc (``mallopt`` absent).

:func:`freeze_startup_objects` moves every object the cyclic garbage collector tracks
into its permanent generation (``gc.freeze()``), once per process. After importing JAX,
coffea, awkward, numba and this package a process tracks ~350k objects (modules,
functions, classes, caches), which never become garbage; a full collection (generation
2) walks them all, and the first gradient pass, which loads programs and lowers JAX's
eager operations (long-lived objects), triggers one: 0.14-0.28 s of the README
processor's 0.5-1.0 s first pass at chunks of 50k (2 cores, load 2.5-3.5), none in later
passes. Frozen, they are skipped by every later collection. Cost: cyclic garbage that
exists at the call is never collected (objects freed by reference counting still are):
measured at the first chunk of a coffea pass, the file's metadata objects of that chunk
(~3,600 small objects, no array buffers). :func:`analysis.runtime.first_pass`
(``stats.derive``'s compiled path) calls it once per process, at its first chunk. ``DIFFCOFFEA_GC_FREEZE=off`` (or ``0``,
``false``, ``no``, ``none``) leaves the garbage collector alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc

from analysis.runtime.environment import settings

__all__ = ["ENV", "GC_ENV", "LIMIT", "freeze_startup_objects", "keep_freed_buffers"]

ENV = "DIFFCOFFEA_MALLOC"
GC_ENV = "DIFFCOFFEA_GC_FREEZE"
#: Default mmap and trim threshold of :func:`keep_freed_buffers`, bytes.
LIMIT = 128 << 20
# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# The limit this process set (empty: none yet): the settings are per process.
_APPLIED: list[int] = []
# Whether this process froze its objects (empty: not yet).
_FROZEN: list[bool] = []


def keep_freed_buffers(limit: int | None = None) -> bool:
    """Keep freed blocks of up to ``limit`` bytes in the C heap (module docstring).

    Parameters
    ----------
    limit : int or None, optional
        The mmap and trim threshold in bytes (``None``: :data:`LIMIT`); a positive
        integer below 2**31.

    Returns
    -------
    bool
        ``True`` when glibc accepted both thresholds (now, or by an earlier call with
        the same ``limit``), ``False`` when ``DIFFCOFFEA_MALLOC`` is off, there is no
        glibc ``mallopt``, or glibc refused a value.
    """
    limit = LIMIT if limit is None else limit
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit < 2**31:
        raise ValueError(f"keep_freed_buffers: limit: expected an integer in (0, 2**31), "
                         f"found {limit!r}")
    if not settings().malloc:
        return False
    if limit in _APPLIED:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(_M_MMAP_THRESHOLD, limit)) and bool(mallopt(_M_TRIM_THRESHOLD, limit))
    if ok:
        _APPLIED[:] = [limit]
    return ok


def freeze_startup_objects() -> bool:
    """Move the objects tracked by the cyclic garbage collector to its permanent
    generation, once per process (module docstring).

    Returns
    -------
    bool
        ``True`` when this process's objects were frozen (now or by an earlier call),
        ``False`` when ``DIFFCOFFEA_GC_FREEZE`` is off or the collector is disabled
        (``gc.disable()``: the process manages collections itself).
    """
    if not settings().gc_freeze or not gc.isenabled():
        return False
    if _FROZEN:
        return True
    gc.freeze()
    _FROZEN.append(True)
    return True
