"""numba's runtime and its extensions' entry points, started on a thread of its own
(:mod:`analysis.driver.warmup`): each use of numba's internals a small named function,
listed in :data:`analysis._compat.numba.PRIVATE` with the cache's (one table of the
names this package takes from numba, checked by ``tests/_compat/test_numba.py``).

Nothing here is imported until used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["claim_entry_points", "compiler_lock", "entry_points_flag", "initialise_runtime",
           "run_entry_points"]


def compiler_lock() -> Any:
    """numba's global compiler lock (held while numba compiles or initialises).

    Returns
    -------
    context manager
        The lock.
    """
    from numba.core.compiler_lock import global_compiler_lock

    return global_compiler_lock


def initialise_runtime() -> None:
    """Initialise numba's runtime for the CPU target (what the first call of a cached
    kernel does).

    Returns
    -------
    None
    """
    from numba.core.registry import cpu_target
    from numba.core.runtime import rtsys

    rtsys.initialize(cpu_target.target_context)


def entry_points_flag() -> bool | None:
    """numba's flag "the extensions' entry points have run"; ``None`` where this numba
    keeps none (then only :func:`run_entry_points` is safe).

    Returns
    -------
    bool or None
        The flag.
    """
    from numba.core import entrypoints

    flag = getattr(entrypoints, "_already_initialized", None)
    return None if flag is None else bool(flag)


def claim_entry_points() -> None:
    """Set numba's flag "the extensions' entry points have run" (before running them,
    as numba does: an extension may compile).

    Returns
    -------
    None
    """
    from numba.core import entrypoints

    entrypoints._already_initialized = True


def run_entry_points() -> None:
    """numba's own ``init_all``: every extension's entry point, once per process.

    Returns
    -------
    None
    """
    from numba.core import entrypoints

    entrypoints.init_all()

