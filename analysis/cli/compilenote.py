"""The one line a run prints before numba compiles its kernels (a first run, or one after
the package changed: minutes of silence otherwise): :class:`CompileNotice`.

A kernel's cache miss is an INFO record on the ``analysis._compat.numba`` logger
(:data:`analysis._compat.numba.COMPILING`), one per kernel; the notice, a logging
handler that :func:`analysis.cli.parser.main` attaches for one call, prints the first
of that call and no other. Its "said once" flag is its own, not the module's: a second
``main()`` in the same process (a notebook, the tests) says it again where it compiles
again. The flag is a byte of memory shared with the processes forked from this one: the
futures executor's workers (forked, with the handler) compile a pass's kernels before
the main process does, so the first of them to miss says it, at the start of the
minutes of silence, and no other process of the run does (two workers missing within
the same microseconds could both print: the flag is not locked). Workers started
afresh (dask, parsl, a ``spawn`` or ``forkserver`` start) have no handler and compile in
silence; the main process's line, where it compiles too, is the run's.
"""

from __future__ import annotations

import logging
import mmap
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
        # "said": one anonymous shared page, the same memory in the processes forked after
        self._said = mmap.mmap(-1, 1)
        self._level = logging.NOTSET

    @property
    def said(self) -> bool:
        """Whether this run (this process or one forked from it) has said it."""
        return self._said[0] == 1

    def emit(self, record: logging.LogRecord) -> None:
        """Print the record's message, where it is the first cache miss said here.

        Parameters
        ----------
        record : logging.LogRecord
            A record of :data:`LOGGER`; only cache misses (they carry
            :data:`analysis._compat.numba.COMPILING_KEY`) count.
        """
        from analysis._compat.numba import COMPILING_KEY

        if self.said or not hasattr(record, COMPILING_KEY):
            return
        self._said[0] = 1
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
