"""The process: its settings and what the package changes in it, in one place.

Importing any :mod:`analysis` module changes one thing in the process: it sets
``JAX_ENABLE_X64=1`` in the environment (and in JAX, if it was imported before), the
float64 policy (:mod:`analysis`), so that every result, here and in every worker
process, is float64. Everything else waits for :func:`configure`:

* the settings: every environment variable the package reads, read once
  (:class:`~analysis.runtime.environment.Settings`, :func:`settings`; docs/guide/environment.md);
* JAX's persistent compilation cache turned on (:mod:`analysis.runtime.compilecache`),
  its directory exported to the workers this process starts;
* the fork hooks that make a process forked after JAX started refuse JAX work in one line
  (:mod:`analysis.runtime.forkguard`);
* glibc's malloc thresholds (:func:`analysis.runtime.allocator.keep_freed_buffers`).

The command line calls :func:`configure` when it starts; the driver
(:class:`analysis.driver.runner.Evaluator`) and every worker's first derivative
(:func:`analysis.stats.derive`, through :func:`ensure_configured`) call
:func:`ensure_configured`, so that a notebook that only calls ``stats.derive`` gets the
same. :func:`first_pass` (at a compiled pass's first chunk, after the imports) also
freezes the start-up objects out of the garbage collector's full collections
(:func:`analysis.runtime.allocator.freeze_startup_objects`). Standard library only.
"""

from __future__ import annotations

from analysis.runtime import allocator, compilecache, forkguard
from analysis.runtime.environment import Settings, reset, settings

__all__ = ["Settings", "configure", "ensure_configured", "first_pass", "reset", "settings"]

# Whether this process was configured (empty: not yet).
_CONFIGURED: list[bool] = []


def configure(values: Settings | None = None) -> Settings:
    """Read the environment again and apply the settings to this process (module docstring).

    Idempotent: a second call applies the settings again (a cache directory exported
    since is picked up).

    Parameters
    ----------
    values : Settings, optional
        The settings to apply (default: :meth:`Settings.from_environ`).

    Returns
    -------
    Settings
        The settings in use, what :func:`settings` returns from now on.

    Raises
    ------
    analysis.errors.ConfigError
        A variable whose value cannot be used (one line naming it).
    """
    chosen = Settings.from_environ() if values is None else values
    reset(chosen)
    compilecache.enable()
    forkguard.install()
    allocator.keep_freed_buffers()
    _CONFIGURED[:] = [True]
    return chosen


def ensure_configured() -> None:
    """:func:`configure` once per process (a worker, a notebook); nothing after.

    Returns
    -------
    None
    """
    if not _CONFIGURED:
        configure()


def first_pass() -> None:
    """At a compiled pass's first chunk: :func:`ensure_configured`, then the start-up
    objects frozen out of full garbage collections (once per process; after the imports,
    so that JAX's, numba's and coffea's objects are among them).

    Returns
    -------
    None
    """
    ensure_configured()
    allocator.freeze_startup_objects()
