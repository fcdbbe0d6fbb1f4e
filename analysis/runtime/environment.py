"""Every environment variable the package reads, read in one place: :class:`Settings`.

:func:`settings` reads the environment once per process (the first call) and keeps what
it read; :func:`analysis.runtime.configure` reads it again (the command line, the driver
and the workers call it when they start) and :func:`reset` forgets it (tests that set a
variable). A value that cannot be used is one line naming the variable, the value and
what was expected (:class:`analysis.errors.ConfigError`), raised where the setting is
first asked for. docs/guide/environment.md lists each variable with its default.
Standard library only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analysis.errors import ConfigError

__all__ = ["OFF", "Settings", "reset", "settings"]

#: Values that turn a switch (``DIFFCOFFEA_MALLOC``, ``DIFFCOFFEA_GC_FREEZE``,
#: ``DIFFCOFFEA_JAX_CACHE``) off, case-insensitively.
OFF = ("0", "off", "false", "no", "none")


def _positive(environ: Mapping[str, str], name: str, kind: type, expected: str) -> Any:
    """``kind(value)`` of the variable ``name`` when set, positive and finite; ``None``
    when unset; a one-line :class:`ConfigError` otherwise."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = kind(raw)
    except ValueError:
        value = 0
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name}={raw!r}: expected {expected}")
    return value


@dataclass(frozen=True)
class Settings:
    """What the environment says, one field per variable (docs/guide/environment.md).

    Attributes
    ----------
    jax_cache : str
        ``DIFFCOFFEA_JAX_CACHE``: JAX's persistent compilation cache directory, ``off``,
        or ``""`` (the default directory under :attr:`cache_home`).
    jax_compilation_cache_dir : str
        ``JAX_COMPILATION_CACHE_DIR``: JAX's own; when the user set it, the package
        leaves the cache to it.
    cache_home : str
        ``XDG_CACHE_HOME``, else ``~/.cache``: where the package's caches live.
    memory_limit_mb : float or None
        ``DIFFCOFFEA_MEMORY_LIMIT_MB``: the largest array a configured size may imply
        (``None``: a share of the machine's available memory, :mod:`analysis.limits`).
    kernel_threads : int or None
        ``DIFFCOFFEA_KERNEL_THREADS``: threads of the numba kernels (``None``: numba's).
    malloc : bool
        ``DIFFCOFFEA_MALLOC`` not off: glibc keeps freed buffers (:mod:`analysis.runtime.allocator`).
    gc_freeze : bool
        ``DIFFCOFFEA_GC_FREEZE`` not off: start-up objects frozen out of full collections.
    """

    jax_cache: str = ""
    jax_compilation_cache_dir: str = ""
    cache_home: str = ""
    memory_limit_mb: float | None = None
    kernel_threads: int | None = None
    malloc: bool = True
    gc_freeze: bool = True

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings that ``environ`` (default ``os.environ``) gives.

        Parameters
        ----------
        environ : mapping of str to str, optional
            The environment to read (``os.environ`` when None).

        Returns
        -------
        Settings

        Raises
        ------
        analysis.errors.ConfigError
            A value that cannot be used (one line naming the variable).
        """
        env = os.environ if environ is None else environ
        return cls(
            jax_cache=env.get("DIFFCOFFEA_JAX_CACHE", "").strip(),
            jax_compilation_cache_dir=env.get("JAX_COMPILATION_CACHE_DIR", ""),
            cache_home=env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            memory_limit_mb=_positive(env, "DIFFCOFFEA_MEMORY_LIMIT_MB", float,
                                      "a positive number of megabytes"),
            kernel_threads=_positive(env, "DIFFCOFFEA_KERNEL_THREADS", int, "a positive integer"),
            malloc=env.get("DIFFCOFFEA_MALLOC", "").strip().lower() not in OFF,
            gc_freeze=env.get("DIFFCOFFEA_GC_FREEZE", "").strip().lower() not in OFF,
        )


# The settings this process read (empty: none yet).
_READ: list[Settings] = []


def settings() -> Settings:
    """This process's settings: the environment read at the first call (or at the last
    :func:`analysis.runtime.configure` or :func:`reset`).

    Returns
    -------
    Settings
    """
    if not _READ:
        _READ.append(Settings.from_environ())
    return _READ[0]


def reset(values: Settings | None = None) -> None:
    """Forget the settings read: the next :func:`settings` reads the environment again
    (or returns ``values``, when given).

    Parameters
    ----------
    values : Settings, optional
        The settings :func:`settings` returns from now on.

    Returns
    -------
    None
    """
    _READ[:] = [] if values is None else [values]
