"""Refusing, at once, JAX work in a process forked after JAX started.

A process pool made with the ``fork`` start method (``ProcessPoolExecutor(2)`` on
Linux before Python 3.14, handed to coffea's ``FuturesExecutor(pool=...)``) copies a
parent whose XLA thread pools hold locks; the child's first JAX computation then
waits forever. Importing :mod:`analysis` registers :func:`os.register_at_fork` hooks
that note, in the child, whether the parent had started JAX; :func:`check` (called by
``stats.derive`` and :class:`processors.DiffProcessor` before any JAX work) raises one
line instead of hanging. Standard library only (the JAX check lives in
:mod:`analysis._compat`).

:class:`ForkAfterJaxError` derives from ``BaseException``, as ``KeyboardInterrupt``
does, because no retry can help: coffea's executors catch ``Exception`` to retry a
chunk, to skip it as a bad file (``skip_bad_files``: every chunk would be dropped) and
to wrap it in "Failed processing file: ..." after printing a traceback; this error
passes by all of them and reaches the caller as it was raised, one line.
"""

from __future__ import annotations

import os

MESSAGE = (
    "this process was forked from one in which JAX had started (a process pool with the "
    "'fork' start method, e.g. ProcessPoolExecutor(2) on Linux), and JAX would hang here: "
    "make the pool with mp_context=multiprocessing.get_context(\"spawn\")"
)

_state = {"parent_started": False, "forked_after_jax": False}


class ForkAfterJaxError(BaseException):
    """JAX work asked of a process forked after its parent started JAX (a
    ``BaseException``: no retry, skip or wrapper of coffea's catches it)."""

    # A process pool sends a worker's exception back with its traceback's text set as
    # __cause__ (concurrent.futures.process._rebuild_exc): that text would print above
    # the one line and name only our own frames; the assignment is ignored.
    @property  # type: ignore[override]
    def __cause__(self) -> BaseException | None:
        return None

    @__cause__.setter
    def __cause__(self, value: BaseException | None) -> None:
        pass


def _before_fork() -> None:
    from analysis._compat.jaxstate import jax_backends_started

    _state["parent_started"] = jax_backends_started()


def _after_fork_in_child() -> None:
    _state["forked_after_jax"] = _state["parent_started"]


def _after_fork_in_parent() -> None:
    _state["parent_started"] = False


def install() -> None:
    """Register the fork hooks (once per process; :mod:`analysis` calls it on import).

    Returns
    -------
    None
    """
    if hasattr(os, "register_at_fork") and not _state.get("installed"):
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child,
                            after_in_parent=_after_fork_in_parent)
        _state["installed"] = True


def forked_after_jax() -> bool:
    """Whether this process was forked from a parent that had started JAX.

    Returns
    -------
    bool
    """
    return bool(_state["forked_after_jax"])


def check() -> None:
    """Raise :class:`ForkAfterJaxError` (one line) in a process forked after JAX started.

    Returns
    -------
    None
    """
    if _state["forked_after_jax"]:
        raise ForkAfterJaxError(MESSAGE) from None
