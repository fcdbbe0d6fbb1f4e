"""The environment of a child process that imports this copy of the package.

Worker processes (Parsl's, the plot workers), the benchmarks' fresh processes and the
tests' subprocesses must import the same ``analysis`` (and ``processors``) as the
process that starts them, not an installed copy elsewhere on their path, while still
finding what the caller's own ``PYTHONPATH`` holds (dependencies installed to a
directory of their own, as on a machine without the package installed). Standard
library only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["ROOT", "child_env"]

#: the directory that holds the ``analysis`` package (and ``processors``)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(environ: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """A copy of ``environ`` (default ``os.environ``) with :data:`ROOT` first on
    ``PYTHONPATH``, the caller's entries after it, and ``extra`` set.

    Parameters
    ----------
    environ : mapping of str to str, optional
        The environment to copy (``os.environ`` when None).
    **extra : str
        Variables to set in the copy (after ``PYTHONPATH``: an ``extra`` ``PYTHONPATH``
        replaces it).

    Returns
    -------
    dict of str to str
        The child's environment; ``PYTHONPATH`` is ``ROOT`` alone when the caller has
        none.
    """
    env = dict(os.environ if environ is None else environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env
