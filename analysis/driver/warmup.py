"""Numba's once-per-process start-up on a background thread: :class:`NumbaWarmUp`.

The first numba kernel a process calls, even one loaded from numba's on-disk cache,
first runs numba's one-time initialisation: the ``numba_extensions`` entry points
(awkward's and vector's numba extensions), the CPU target's code generator and numba's
runtime (NRT, compiled with LLVM: ~0.05 s) and, for numba's own cache loads and any
compilation, the CPU target's typing and lowering registries (``numba.np``,
``numba.cpython``; numba's BLAS check imports ``scipy.linalg``: ~0.35-0.4 s). This
package's kernels load their cached machine code without the registries
(:class:`analysis._compat.numba.FastLoadCache`; numba loads them
itself before anything compiles), so :class:`NumbaWarmUp` starts the rest of that
initialisation (entry points, code generator, runtime) on a thread while the caller
does other work (the evaluator opens and checks the files, the optimisation loop sets
up, the first pass reads its chunks), and :meth:`NumbaWarmUp.wait` joins it before the
first kernel runs. The parts of that work that release the GIL (file reads,
decompression, LLVM's work on the runtime) then overlap it; the rest is moved, not
saved. Measured on the demo's second run (issue 35): the warm-up with the registries
took 0.4-0.5 s (load ~2), most of the first optimisation step; without them 0.14-0.18 s
at load 8, done before the first step begins.

Extensions left out (``NumbaWarmUp(skip=("vector",))``, what the command line asks
for): their entry points are not run in this process, and numba, which runs the
entry points once per process, does not run them later either. vector's (~0.15-0.5 s:
it imports and registers vector's numba backends) is only needed to pass vector's own
objects (``vector.obj``) to a numba function; the command line's kernels take numpy
arrays, and coffea's vector behaviours run on awkward arrays, not through numba. Code
that does need it in such a process calls ``vector.register_numba()`` (vector's own
function, what the entry point runs).

Safety: the thread holds numba's global compiler lock for the whole initialisation, so
a numba compilation or cache load elsewhere in the process waits for it. The first
pass waits for the extensions' entry points (:meth:`NumbaWarmUp.wait_extensions`)
before it reads anything, so numba code that a reader may call (coffea's cross-reference
kernels take awkward's builders) types its arguments with every extension registered,
and waits for the rest before its first kernel (the processor's ``before_kernels``,
:class:`analysis.pipeline.job.Job`, is :func:`numba_ready`): no kernel of ours is loaded
mid-initialisation. An error in the thread is kept and left to numba to raise again where the
pass needs it (the same initialisation then runs in the main thread).
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Collection

__all__ = ["NumbaWarmUp", "numba_ready"]

_log = logging.getLogger("analysis.driver.warmup")


def _entry_points(skip: Collection[str]) -> None:
    """numba's ``entrypoints.init_all`` (each ``numba_extensions`` entry point named
    ``init``, once per process, a failing one a warning as numba gives it) but for
    those whose module is in a top-level package of ``skip``."""
    from importlib import metadata

    from analysis._compat import numbaruntime as numba_compat

    done = numba_compat.entry_points_flag()
    if not skip or done is None:
        numba_compat.run_entry_points()  # numba's own (a numba that keeps its flag elsewhere)
        return
    if done:
        return
    numba_compat.claim_entry_points()  # as numba: an extension may compile
    for ep in metadata.entry_points().select(group="numba_extensions", name="init"):
        if ep.module.split(".")[0] in skip:
            _log.debug("numba extension %s left out", ep.value)
            continue
        try:
            ep.load()()
        except Exception as err:  # noqa: BLE001  (numba warns and goes on)
            warnings.warn(f"Numba extension module '{ep.module}' failed to load due to "
                          f"'{type(err).__name__}({err})'.", stacklevel=2)


def _initialise_numba(skip: Collection[str] = (),
                      extensions: threading.Event | None = None) -> None:
    """numba's extension entry points (but ``skip``'s), the CPU target's code generator
    and numba's runtime, as the first call of a cached kernel would run them (not the
    registries: module docstring); ``extensions`` is set once the entry points have
    run."""
    from analysis._compat import numbaruntime as numba_compat

    with numba_compat.compiler_lock():
        _entry_points(skip)
        if extensions is not None:
            extensions.set()
        numba_compat.initialise_runtime()


def numba_ready() -> None:
    """Wait until no numba initialisation (or compilation) holds numba's compiler lock.

    A :class:`NumbaWarmUp` holds that lock from before the extensions' entry points to
    the end of its initialisation, so once :meth:`NumbaWarmUp.wait_extensions` has
    returned, this waits for the rest of it (in any process: elsewhere it takes a free
    lock). A module function, so a processor that carries it pickles (coffea's
    iterative executor pickles the processor too).

    Returns
    -------
    None
    """
    from analysis._compat import numbaruntime as numba_compat

    with numba_compat.compiler_lock():
        pass


class NumbaWarmUp:
    """numba's one-time initialisation (module docstring), started on a daemon thread.

    ``NumbaWarmUp()`` starts it; :meth:`wait` joins it (idempotent).

    Parameters
    ----------
    skip : collection of str, optional
        Top-level packages whose numba extensions are left out of this process (module
        docstring), e.g. ``("vector",)``; default none.
    """

    def __init__(self, skip: Collection[str] = ()) -> None:
        #: the exception the initialisation raised, if any (numba raises it again later)
        self.error: BaseException | None = None
        self.skip = tuple(skip)
        self._extensions = threading.Event()
        self._thread = threading.Thread(target=self._run, name="diffcoffea-numba-warm-up",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            _initialise_numba(self.skip, self._extensions)
        except BaseException as err:  # numba raises it where a pass needs it
            self.error = err
            _log.debug("numba warm-up failed: %r", err)

    def wait_extensions(self) -> None:
        """Block until the extensions' entry points have run (the first ~0.05 s of the
        initialisation), or the initialisation has ended (at once if so).

        From then on, code that calls numba (coffea's readers may) types its arguments
        with every extension known, and its compilation or cache load waits for the
        rest under numba's compiler lock: reading the first chunks may overlap the rest.

        Returns
        -------
        None
        """
        while not self._extensions.wait(0.05):
            if not self._thread.is_alive():
                return

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
