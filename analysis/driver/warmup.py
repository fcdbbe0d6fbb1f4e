"""Numba's once-per-process start-up on a background thread: :class:`NumbaWarmUp`.

The first numba kernel a process calls, even one loaded from numba's on-disk cache,
first runs numba's one-time initialisation: the ``numba_extensions`` entry points
(awkward's and vector's numba extensions, ~0.45 s) and the CPU target's registries
(``numba.np``, ``numba.cpython``; numba's BLAS check imports ``scipy.linalg``), about
0.7-1 s in all (issue 35: most of the first optimisation step of a second run, whose
compilations are all cached). :class:`NumbaWarmUp` starts that initialisation on a
thread while the caller does other work (the evaluator opens and checks the files,
the optimisation loop sets up), and :meth:`NumbaWarmUp.wait` joins it before the first
pass. The parts of that work that release the GIL (file reads, decompression, the
object code numba's registries load) then overlap it; the rest is moved, not saved.

Safety: the thread holds numba's global compiler lock for the whole initialisation, so
a numba compilation or cache load elsewhere in the process waits for it; the caller
joins it before its passes, so no kernel of ours is typed while an extension is half
registered. An error in the thread is kept and left to numba to raise again where the
pass needs it (the same initialisation then runs in the main thread).
"""

from __future__ import annotations

import logging
import threading

__all__ = ["NumbaWarmUp"]

_log = logging.getLogger("analysis.driver.warmup")


def _initialise_numba() -> None:
    """numba's extension entry points and CPU target registries, as its first
    compilation or cache load would run them."""
    from numba.core import entrypoints
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    with global_compiler_lock:
        entrypoints.init_all()
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()


class NumbaWarmUp:
    """numba's one-time initialisation (module docstring), started on a daemon thread.

    ``NumbaWarmUp()`` starts it; :meth:`wait` joins it (idempotent).
    """

    def __init__(self) -> None:
        #: the exception the initialisation raised, if any (numba raises it again later)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="diffcoffea-numba-warm-up",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            _initialise_numba()
        except BaseException as err:  # numba raises it where a pass needs it
            self.error = err
            _log.debug("numba warm-up failed: %r", err)

    def wait(self) -> None:
        """Block until the initialisation has finished (at once if it has).

        Returns
        -------
        None
        """
        self._thread.join()

    @property
    def done(self) -> bool:
        """Whether the initialisation has finished."""
        return not self._thread.is_alive()
