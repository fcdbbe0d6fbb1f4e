"""Whether this process's JAX has started its backends (and with them XLA's threads)."""

from __future__ import annotations

import sys


def jax_backends_started() -> bool:
    """True when JAX is imported and has initialised a backend in this process.

    Returns
    -------
    bool
        ``False`` before ``import jax`` or before its first computation; where the
        private check is missing (another JAX version), whether JAX is imported.
    """
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - another JAX layout
        return True
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started()) if started is not None else True
