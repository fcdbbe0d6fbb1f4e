"""JAX's persistent compilation cache, on by default: :func:`enable`.

A JAX computation compiled once is kept on disk, so that a new process (the next
``diffcoffea optimize``, a coffea futures/dask/parsl worker, a benchmark's child) loads
it instead of compiling again. :func:`analysis.runtime.configure` calls :func:`enable` with
no argument, so the command line, ``Runner``/``Evaluator`` passes, processors (their
first ``stats.derive``) and the benchmarks all use the cache without doing anything.

Directory (``path=None``), first that applies:

1. ``JAX_COMPILATION_CACHE_DIR`` set by the user: left alone (JAX reads it itself);
   :func:`enable` returns ``None`` and changes nothing;
2. ``DIFFCOFFEA_JAX_CACHE=off`` (or ``0``, ``false``, ``no``, ``none``): no cache;
3. ``DIFFCOFFEA_JAX_CACHE=<dir>``;
4. ``$XDG_CACHE_HOME/diffcoffea/jax``, else ``~/.cache/diffcoffea/jax``.

How it reaches workers: the directory and the thresholds go into the environment
(``JAX_COMPILATION_CACHE_DIR``-style flags ``JAX_PERSISTENT_CACHE_MIN_*`` and
``DIFFCOFFEA_JAX_CACHE``), which JAX reads when it is imported and which worker
processes started afterwards inherit; a worker's first ``stats.derive`` calls
:func:`analysis.runtime.ensure_configured`, which calls :func:`enable` there too. If JAX
is already imported, the
settings are applied to it directly (and a cache JAX had opened on another directory is
closed, so that the new one is used from the next compilation on).

Keys and safety are JAX's: an entry's key hashes the computation, the compile options,
the backend and the jax/jaxlib versions, so an upgrade or another device never reads
an old entry; entries are written to a temporary file and renamed (atomic), so
concurrent workers sharing the directory are safe. Thresholds are 0 s and 0 bytes:
every compilation is cached (a chunk kernel takes 1-10 s to compile, the small
helpers milliseconds, and loading any of them is cheaper than compiling). A directory
that cannot be created (a read-only home on a batch node) disables the cache for that
process: computations compile as without it. The cache is trusted code: do not point
it at a directory others can write to (JAX's warning).

Cost: ~10-20 kB per entry on disk, never evicted by JAX (``rm -r`` the directory to
reclaim it; it is rebuilt on use).
"""

from __future__ import annotations

import os
import sys

from analysis.runtime.environment import OFF, settings

__all__ = ["ENV", "directory", "enable"]

ENV = "DIFFCOFFEA_JAX_CACHE"

# Cache every compilation (module docstring): JAX's defaults (1 s, and a minimum entry
# size) skip the small ones, which a new process then compiles again.
_SETTINGS = {
    "jax_persistent_cache_min_compile_time_secs": 0.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}


def directory() -> str | None:
    """The directory :func:`enable` uses with ``path=None`` (module docstring), or
    ``None`` when the cache is off or the user's own ``JAX_COMPILATION_CACHE_DIR`` rules.

    Returns
    -------
    str or None
        An absolute or user-expanded path; not created here.
    """
    now = settings()
    choice, jax_dir = now.jax_cache, now.jax_compilation_cache_dir
    if jax_dir and jax_dir != choice:  # the user's own (ours is exported as both)
        return None
    if choice.lower() in OFF:
        return None
    if choice:
        return os.path.expanduser(choice)
    return os.path.join(now.cache_home, "diffcoffea", "jax")


def enable(path: str | os.PathLike[str] | None = None) -> str | None:
    """Turn JAX's persistent compilation cache on, in this process and the workers it starts.

    Idempotent and cheap (it does not import JAX); safe to call from a processor's
    ``process`` or before a ``Runner`` call.

    Parameters
    ----------
    path : str or os.PathLike, optional
        The cache directory. ``None`` (default): :func:`directory` (the module
        docstring's order: the user's ``JAX_COMPILATION_CACHE_DIR`` wins,
        ``DIFFCOFFEA_JAX_CACHE``, then ``~/.cache/diffcoffea/jax``). An explicit path
        always applies, and is exported to worker processes as ``DIFFCOFFEA_JAX_CACHE``.

    Returns
    -------
    str or None
        The directory in use, or ``None`` if the cache is off, left to the user's JAX
        setting, or the directory cannot be created.
    """
    where = os.fspath(path) if path is not None else directory()
    if where is None:
        return None
    where = os.path.abspath(os.path.expanduser(where))
    try:
        os.makedirs(where, exist_ok=True)
    except OSError:
        return None  # read-only home, e.g. on a batch worker: compile as before
    os.environ[ENV] = where  # worker processes choose the same directory
    settings = {"jax_compilation_cache_dir": where, **_SETTINGS}
    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "config"):
        if jax.config.jax_compilation_cache_dir != where:
            from jax.experimental.compilation_cache import compilation_cache

            compilation_cache.reset_cache()  # JAX opens its cache once: reopen it here
        for key, value in settings.items():
            jax.config.update(key, value)
    # Read by JAX at its import (its flags default to the upper-case environment
    # variables), here and in every worker process, which inherits them.
    for key, value in settings.items():
        os.environ[key.upper()] = str(value)
    return where
