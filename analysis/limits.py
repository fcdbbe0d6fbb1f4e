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

Besides the memory limit, fixed bounds (``MAX_*``, ``KAPPA_MAX``) on counts that no
analysis needs beyond and that break a library underneath (XLA, the parser, the
process table), and :func:`regular_file`: a file read whole must be a regular file
(never a FIFO, a device or a directory) of bounded size. Every bound, its default and
how to raise it: docs/guide/limits.md.

Only the standard library; nothing here knows about configs or data.
"""

from __future__ import annotations

import errno
import os
import stat

from analysis.errors import ConfigError
from analysis.runtime.environment import settings

__all__ = [
    "ENV_LIMIT",
    "FILE_LIMIT",
    "FIT_MAX_STEPS",
    "GEN_BYTES_PER_EVENT",
    "KAPPA_MAX",
    "MAX_GENERATED_EVENTS",
    "MAX_GENERATED_FILES",
    "MAX_GRID_POINTS",
    "MAX_LAYERS",
    "MAX_RETRIES",
    "MAX_SCORE_PARAMETERS",
    "MAX_REPLICAS",
    "MAX_SEED",
    "MAX_WORKERS",
    "ResourceError",
    "check_bytes",
    "memory_limit",
    "regular_file",
    "show_bytes",
]

#: Environment variable overriding :func:`memory_limit` (megabytes, a positive number).
ENV_LIMIT = "DIFFCOFFEA_MEMORY_LIMIT_MB"

#: Fraction of the available memory one array may take.
FRACTION = 0.5

#: Largest lnN ``kappa`` (and smallest ``1 / KAPPA_MAX``): a 100-fold yield change at
#: one standard deviation. Beyond it the unit Gaussian constraint of ``theta`` no longer
#: bounds the yield (``kappa ** theta`` spans decades within the constraint's width),
#: so the normalisation would act as an unconstrained one without a word.
KAPPA_MAX = 100.0

#: Deepest learned-score network (hidden layers): XLA compiles one fused loop body per
#: layer, and thousands of layers abort LLVM instead of failing in one line.
MAX_LAYERS = 64

#: Most weights of one learned score (all its layers): every weight is a named parameter of
#: the optimiser (a Python entry, a column of results.json), so 10**6 is far beyond a
#: cut-optimisation score and far below what breaks the book-keeping.
MAX_SCORE_PARAMETERS = 10**6

#: Most worker processes of a local executor (futures, a local dask cluster):
#: ``workers`` beyond it is refused (each worker is a Python process with JAX loaded,
#: ~300 MB); a remote dask cluster sets its own.
MAX_WORKERS = 256

#: Most retries of a chunk that fails with a transient I/O error (corrupt bytes are a
#: bad file, tried once: :mod:`analysis.data.faults`); 10**9 retried for ever before.
MAX_RETRIES = 10

#: Most events the demo generator writes in one dataset (``generate: {events}``,
#: ``make-dataset --events``): ~0.4 KB each on disk, so 10**8 is ~40 GB.
MAX_GENERATED_EVENTS = 10**8
#: Most files of one generated dataset.
MAX_GENERATED_FILES = 10**4
#: Seeds are non-negative and below 2**63 (numpy's SeedSequence takes any non-negative
#: int, but results.json and the manifest store them as JSON numbers).
MAX_SEED = 2**63 - 1
#: Memory the generator needs per event of one file, at least (its arrays in float64).
GEN_BYTES_PER_EVENT = 1024

#: Most Poisson-bootstrap replicas (``optimizer.replicas``): each is a column of every
#: chunk's selected sums; 10**4 puts the bootstrap's own error far below 1 %, while
#: 10**8 took 13 GB and minutes.
MAX_REPLICAS = 10**4

#: Most points of a ``scan --grid`` (all axes together): each is a full pass's
#: statistics, evaluated in batches, kept for results.json.
MAX_GRID_POINTS = 10**6
# The default cap on BFGS steps of a profile fit (analysis.likelihood.fit.MAX_STEPS;
# a config's discovery_significance.max_steps): here so that the config's default is
# read without loading the likelihood's solvers.
FIT_MAX_STEPS = 1000

#: Largest input file read whole into memory (a correction JSON, a weights npz, a
#: fileset, a config): 1 GiB, or the memory limit if smaller.
FILE_LIMIT = 2**30


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
    mb = settings().memory_limit_mb  # DIFFCOFFEA_MEMORY_LIMIT_MB, checked there
    if mb is not None:
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


def regular_file(path: str | os.PathLike, what: str, *, error: type[Exception] = ConfigError,
                 max_bytes: int | None = None) -> int:
    """The size of ``path`` if it is a regular file (symlinks followed) of at most
    ``max_bytes`` (default: :data:`FILE_LIMIT` or the memory limit if smaller); else
    ``error`` in one line ``"{path}: {what} ..."``. Opened without blocking, so a FIFO
    is refused at once rather than waited on; a device, a directory or a symlink loop
    is refused too (before anything reads it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except (OSError, ValueError) as err:
        if getattr(err, "errno", None) == errno.ELOOP:
            raise error(f"{path}: {what} is a symlink loop") from None
        if getattr(err, "errno", None) == errno.ENXIO:  # a FIFO (or socket) with no writer
            raise error(f"{path}: {what} is not a regular file (a FIFO or socket)") from None
        reason = getattr(err, "strerror", None) or str(err)
        raise error(f"{path}: cannot open the {what}: {reason}") from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO"
                if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "not a regular file")
        raise error(f"{path}: {what} is {kind}; expected a regular file")
    bound = min(FILE_LIMIT, memory_limit()) if max_bytes is None else max_bytes
    if st.st_size > bound:
        raise error(f"{path}: {what} is {show_bytes(st.st_size)}, more than the "
                    f"{show_bytes(bound)} bound on a file read whole")
    return st.st_size


def read_untrusted(path: str | os.PathLike, *, max_bytes: int,
                   error: type[Exception]) -> bytes | None:
    """The bytes of a cache file that anyone may have planted, or ``None`` where there
    is none.

    Opened without following a link and without waiting on a FIFO; ``error(reason)``
    (a short reason, without the path) where it cannot be opened, is not a regular file,
    or holds more than ``max_bytes``. Up to ``max_bytes + 1`` bytes are read, so a file
    that grows meanwhile shows as too long to its caller's checks.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:  # a link (O_NOFOLLOW), unreadable
        raise error(f"cannot open it ({err.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise error("not a regular file")
        if st.st_size > max_bytes:
            raise error(f"{st.st_size} bytes, over {max_bytes}")
        return fh.read(max_bytes + 1)
