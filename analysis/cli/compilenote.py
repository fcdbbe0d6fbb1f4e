"""The one line a run prints before numba compiles its kernels (a first run, or one after
the package changed: minutes of silence otherwise): :class:`CompileNotice`.

A kernel's cache miss is an INFO record on the ``analysis._compat.numba`` logger
(:data:`analysis._compat.numba.COMPILING`), one per kernel; the notice, a logging
handler that :func:`analysis.cli.parser.main` attaches for one call, prints the first
of that call and no other. Its "said once" flag is its own, not the module's: a second
``main()`` in the same process (a notebook, the tests) says it again where it compiles
again. Only the process that attached it prints: a process forked from it inherits the
handler but prints nothing (a pool of them: one line each otherwise). Workers started
afresh (the futures executor's loky pool, dask, parsl) have no handler: they compile a
pass's kernels in silence, and the main process's line, when it compiles too (after
the pass), is the run's.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

__all__ = ["LOGGER", "CompileNotice"]

#: The logger of numba's cache misses (:mod:`analysis._compat.numba`).
LOGGER = "analysis._compat.numba"


class CompileNotice(logging.Handler):
    """Prints ``diffcoffea: compiling the numba kernels ...`` once, at the first cache
    miss of a kernel after it is attached (:meth:`attach`).

    Parameters
    ----------
    stream : text stream, optional
        Where the line goes (default: the process's stderr when it is said).
    """

    def __init__(self, *, stream: TextIO | None = None) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.said = False
        self._pid = os.getpid()
        self._level = logging.NOTSET

    def emit(self, record: logging.LogRecord) -> None:
        """Print the record's message, where it is the first cache miss said here.

        Parameters
        ----------
        record : logging.LogRecord
            A record of :data:`LOGGER`; only cache misses (they carry
            :data:`analysis._compat.numba.COMPILING_KEY`) count.
        """
        from analysis._compat.numba import COMPILING_KEY

        if self.said or os.getpid() != self._pid or not hasattr(record, COMPILING_KEY):
            return
        self.said = True
        stream = self.stream if self.stream is not None else sys.stderr
        print(f"diffcoffea: {record.getMessage()}", file=stream, flush=True)

    def attach(self) -> CompileNotice:
        """Listen to :data:`LOGGER` at INFO (its level is kept to restore).

        Returns
        -------
        CompileNotice
            Itself.
        """
        log = logging.getLogger(LOGGER)
        self._level = log.level
        if log.getEffectiveLevel() > logging.INFO:
            log.setLevel(logging.INFO)
        log.addHandler(self)
        return self

    def detach(self) -> None:
        """Stop listening; the logger's level as it was."""
        log = logging.getLogger(LOGGER)
        log.removeHandler(self)
        log.setLevel(self._level)
