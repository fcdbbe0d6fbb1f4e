"""The command line's garbage-collector pause during start-up: :func:`start_up_done`.

A module of its own so that the commands (:mod:`analysis.cli.commands`) and the parser
(:mod:`analysis.cli.parser`, which imports the commands when one runs) both import it
without importing each other.
"""

from __future__ import annotations

import gc
from typing import Any

__all__ = ["start_up_done"]


def start_up_done(args: Any) -> None:
    """The command's imports are done, its passes come next: from the command line
    (:func:`main` with ``argv=None``), the objects made so far (modules, the config,
    the evaluator) move to the garbage collector's permanent generation and the
    collector, off since the command started, runs again (the passes, whose chunks may
    leave cycles behind, run with it).

    While the heap grows from nothing to ~430k objects (JAX, numba, awkward, coffea),
    Python's collector ran ~1000 collections, 7 of them over everything: 1.2 s of the
    README's main job at load 6, 0.3 s with the imports paused; the objects kept for
    the whole run need no collecting. Called by the commands once (later calls do
    nothing); in a process that called :func:`main` with arguments (a notebook, the
    tests) it does nothing."""
    if getattr(args, "gc_paused", False):
        args.gc_paused = False
        gc.freeze()
        gc.enable()
