"""Resource bounds: sizes a config or an argument sets are checked before they are allocated.

A count threshold's upper bound, a ``max_objects``, a histogram's ``bins`` or a grid
size each fix the size of an array that some kernel allocates per chunk. A hostile (or
mistyped) value such as ``bounds: [1, 1000000000]`` on a count threshold would ask for
terabytes: instead of letting the kernel's allocator (or the kernel's out-of-memory
killer) fail somewhere in the first chunk, :func:`check_bytes` compares the size an
array *at least* needs against :func:`memory_limit` and raises one
:class:`ResourceError` line naming the key, the size and the limit.

The limit is half of the memory available when the check runs (``MemAvailable`` of
``/proc/meminfo``; the physical memory where that is unknown), or
``DIFFCOFFEA_MEMORY_LIMIT_MB`` when set. The estimates are lower bounds (one float64 per
state, per event of a chunk), so a configuration within the limit may still need a few
times more; one beyond it can never run.

Only the standard library; nothing here knows about configs or data.
"""

from __future__ import annotations

import math
import os

from analysis.errors import ConfigError

__all__ = ["ENV_LIMIT", "ResourceError", "check_bytes", "memory_limit", "show_bytes"]

#: Environment variable overriding :func:`memory_limit` (megabytes, a positive number).
ENV_LIMIT = "DIFFCOFFEA_MEMORY_LIMIT_MB"

#: Fraction of the available memory one array may take.
FRACTION = 0.5


class ResourceError(ConfigError, MemoryError):
    """A size set by a config key or an argument is beyond :func:`memory_limit`.

    A :class:`~analysis.errors.ConfigError` (one line, exit 2 from the command line) and
    a ``MemoryError`` (what a Python caller would otherwise have met, much later)."""


def _available() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 8 * 2**30  # unknown platform: assume a small machine


def memory_limit() -> int:
    """Largest array, in bytes, a configured size may imply (module docstring)."""
    env = os.environ.get(ENV_LIMIT)
    if env:
        try:
            mb = float(env)
        except ValueError:
            mb = float("nan")
        if not (math.isfinite(mb) and mb > 0):
            raise ConfigError(f"{ENV_LIMIT}={env!r}: expected a positive number of megabytes")
        return int(mb * 2**20)
    return int(_available() * FRACTION)


def show_bytes(n: float) -> str:
    """``"7.5 GB"``-style size (binary units) for messages."""
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if n < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check_bytes(key: str, nbytes: float, what: str, *, limit: int | None = None) -> None:
    """Raise :class:`ResourceError` if ``nbytes`` (what ``key`` implies) exceeds the limit.

    The message: ``"{key}: implies {what} = {size}, more than the memory limit
    {limit} (half the available memory unless DIFFCOFFEA_MEMORY_LIMIT_MB is set)"``.
    """
    limit = memory_limit() if limit is None else limit
    if not nbytes <= limit:  # also NaN / inf
        raise ResourceError(
            f"{key}: implies {what} = {show_bytes(nbytes)}, more than the memory limit "
            f"{show_bytes(limit)} (half the available memory unless {ENV_LIMIT} is set)"
        )
