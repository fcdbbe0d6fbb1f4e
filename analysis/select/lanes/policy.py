"""The one compilation policy of the numba kernels: every numba loop of the package
(the pipeline's kernels, the one-set walk of :mod:`analysis.select.chainwalk`) decorates
with these.

- :data:`njit`: a compiled loop. ``cache=True`` (machine code kept on disk beside the
  sources, keyed by the sources it inlines: :func:`depends`, through
  :func:`analysis._compat.numba.guard_cache`, which also checks the files and loads
  them without numba's registries); ``nogil=True`` (the host
  runs blocks of events on threads: :mod:`analysis.pipeline.backends.numba._fastpool`);
  ``fastmath=False`` (no reassociation: the floats are the ones the docstrings' order of
  operations gives, the same for any block size or thread count; the tests compare
  bits).
- :data:`elementwise`: a plain element-wise loop (no reduction) with numpy's error
  model: a division by zero gives inf or NaN as numpy's does instead of raising, so
  that LLVM can vectorise a loop with a division (Python's check of every divisor keeps
  it scalar, 4x slower); the same floats otherwise.
- :data:`inline`: a helper of the loops, the same policy, inlined into its callers at
  numba's IR level (``inline="always"``: the lane arithmetic and the walk's steps cost
  no call, and LLVM sees them together with the loop around them).
- :func:`compiled`: a loop compiled once with LLVM's SLP vectorizer on (numba leaves it
  off), which packs the lane arithmetic into vector operations without reassociating
  anything.
- :func:`vectorised`: the same for a loop called whole (no block range), compiled for
  the types of its arguments without running it.
- :func:`writes`: a loop's host callers pass every array it only reads read-only
  (:func:`host_args`), whichever array they hold: numba compiles a version per
  argument type and a read-only array (``np.asarray`` of a JAX array, a column
  read from a file) types apart from a writable one, so that a loop fed both kinds
  compiled twice (seconds of a first run each).
- :func:`specialise`: a primitive of the lane arithmetic whose implementation is chosen
  at compile time from its arguments' types (numba's ``overload``, the same policy,
  inlined): the walk's steps are written once over "lane vectors" and compiled per
  caller into the variant with tangents (a vector is an array of lanes) or the one for
  values only (a vector is a number:
  :mod:`analysis.select.lanes.arith`); :func:`specialise_on` the same
  from a stub and the implementations per kind of one argument.

A kernel module imports only numpy, numba, math, the modules of its folder and those of
:mod:`analysis.select.lanes` (``tests/pipeline/backends/numba/test_kernel_imports.py``).
"""

from __future__ import annotations

import os

import numba
import numpy as np
from numba.extending import overload

from analysis._compat.numba import guard_cache

__all__ = ["POLICY", "SHARED", "compiled", "depends", "elementwise", "host_args", "inline",
           "inlines_folder", "njit", "specialise", "specialise_on", "vectorised", "writes"]

#: numba's options of every loop (module docstring); own processors' FFI callbacks
#: (:mod:`analysis.select.singlekernels`) compile with them too.
POLICY = {"cache": True, "nogil": True, "fastmath": False}

_HERE = os.path.dirname(os.path.abspath(__file__))
#: The source files every kernel inlines: this folder's modules (this policy, the lane
#: arithmetic and its buffers, the walk's steps, the soft cut's rule), sorted.
SHARED = tuple(sorted(os.path.join(_HERE, f) for f in os.listdir(_HERE) if f.endswith(".py")))
# Folders whose kernels inline one another across modules: folder -> its modules.
_FOLDERS: dict[str, tuple[str, ...]] = {}


def inlines_folder(module_file: str) -> None:
    """Key each kernel defined in the folder of ``module_file`` by every module of that
    folder too (:func:`depends`): its kernels inline one another's helpers across
    files. Called by the folder's ``__init__`` (before any of its kernels is decorated).

    Parameters
    ----------
    module_file : str
        A module of the folder (its ``__init__``'s ``__file__``).
    """
    folder = os.path.dirname(os.path.abspath(module_file))
    _FOLDERS[folder] = tuple(sorted(os.path.join(folder, f) for f in os.listdir(folder)
                                    if f.endswith(".py")))


def depends(fn) -> tuple[str, ...]:
    """The source files a kernel decorated here (the Python function ``fn``) depends on
    beyond its own (which numba keys): its folder's modules where the folder inlines
    (:func:`inlines_folder`), then :data:`SHARED`.

    Parameters
    ----------
    fn : function
        The kernel's Python function.

    Returns
    -------
    tuple of str
        The paths.
    """
    folder = os.path.dirname(os.path.abspath(fn.__code__.co_filename))
    return (*_FOLDERS.get(folder, ()), *SHARED)


def _policy(**options):
    """numba's ``njit`` with :data:`POLICY` and ``options``, its cache the package's
    (keyed by :func:`depends`)."""
    decorate = numba.njit(**POLICY, **options)

    def apply(fn):
        kernel = decorate(fn)
        guard_cache(getattr(kernel, "_cache", None), depends(fn))
        return kernel

    return apply


njit = _policy()
inline = _policy(inline="always")
elementwise = _policy(error_model="numpy")


def specialise(stub):
    """Decorate the typing function of ``stub`` (a Python function that names the
    primitive and documents it): called by numba with the arguments' types, it returns
    the implementation for those types (``numba.extending.overload``, inlined at numba's
    IR level, compiled with this policy but ``cache=False``). numba also compiles the
    implementation alone, to type it: none of that machine code runs (a caller types and
    inlines the implementation's IR afresh), so it is not kept on disk (numba's cache
    of it would be keyed by the implementation's file alone and read unchecked: a spoilt
    file failed every caller's compilation; ``tests/select/test_specialise_cache.py``)."""
    return overload(stub, inline="always", jit_options={**POLICY, "cache": False})


def specialise_on(arg: str, *cases):
    """Decorate a stub (a Python function that names a primitive, its arguments and its
    docstring; its body is never run) into a :func:`specialise` primitive whose
    implementation is chosen by the numba type of its argument ``arg``: ``cases`` are
    ``(test, implementation)`` pairs, tried in order (``test`` called with that type), then
    the implementation for every other type; each a plain function of the stub's
    arguments (same names). Called outside numba, the primitive raises."""
    *pairs, otherwise = cases

    def register(stub):
        at = stub.__code__.co_varnames.index(arg)

        def primitive(*args):
            raise NotImplementedError("compiled only (numba)")

        def choose(*kinds):
            for test, impl in pairs:
                if test(kinds[at]):
                    return impl
            return otherwise

        for fn in (primitive, choose):  # the stub's signature (numba binds the call to it)
            fn.__wrapped__ = stub
        for name in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(primitive, name, getattr(stub, name))
        specialise(primitive)(choose)
        return primitive
    return register


_COMPILED: set = set()


def writes(kernel, *names: str):
    """Declare the arguments ``names`` of ``kernel`` (a compiled loop) the arrays it
    writes: :func:`host_args` passes its other arrays read-only.

    Parameters
    ----------
    kernel : numba dispatcher
        The loop.
    *names : str
        Its arguments that it writes (its outputs).

    Returns
    -------
    numba dispatcher
        ``kernel``, marked.
    """
    code = kernel.py_func.__code__
    out = {code.co_varnames.index(n) for n in names}
    kernel.reads = tuple(i for i in range(code.co_argcount) if i not in out)
    return kernel


def _readonly(a):
    """``a``, or a read-only view of it (no copy) where it is a writable array."""
    if not isinstance(a, np.ndarray) or not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view


def host_args(kernel, args: tuple) -> tuple:
    """``args`` of ``kernel`` with the arrays it only reads (:func:`writes`) read-only:
    one compiled version for either kind its callers hold; ``args`` as they are for a
    loop not marked.

    Parameters
    ----------
    kernel : numba dispatcher
        The loop.
    args : tuple
        Its leading arguments (a block range may follow).

    Returns
    -------
    tuple
        The arguments to call it with.
    """
    reads = getattr(kernel, "reads", None)
    if reads is None:
        return args
    return tuple(_readonly(a) if i in reads else a for i, a in enumerate(args))


def _kinds(args: tuple) -> tuple:
    """What of ``args`` chooses a compiled version (cheap to read, unlike
    ``numba.typeof``): each array's dimensions, dtype and contiguity, each other
    argument's Python type."""
    return tuple((a.ndim, a.dtype.char, a.flags.c_contiguous) if hasattr(a, "flags")
                 else type(a) for a in args)


def compiled(kernel, args: tuple):
    """``kernel`` once compiled for ``args`` (the arguments before the block range) with
    the SLP vectorizer on: a first call over no blocks (``b0 = b1 = 0``) in this thread,
    before the thread pool runs it. numba's pass managers read the setting at each
    compilation, so switching it on around this call is local to the functions compiled
    inside. Once per kind of arguments (:func:`_kinds`: the walk of
    :mod:`analysis.pipeline.backends.numba.kernels._numba_hist` takes one variant or a
    pair, or two pairs in pages, each its own version); a call with arguments of the
    same kinds but other types would compile a version without it (the same results,
    slower): the kernel's callers build its arguments with fixed dtypes."""
    key = (kernel, _kinds(args))
    if key not in _COMPILED:
        args = host_args(kernel, args)
        old = numba.config.SLP_VECTORIZE
        numba.config.SLP_VECTORIZE = 1
        try:
            kernel(*args, 0, 0)
        finally:
            numba.config.SLP_VECTORIZE = old
        _COMPILED.add(key)
    return kernel


def vectorised(kernel, args: tuple):
    """``kernel`` once compiled for the types of ``args`` (its whole argument list: a
    loop that takes no block range, such as the histogram fills) with the SLP
    vectorizer on, as :func:`compiled` does, without calling it (numba's
    ``Dispatcher.compile``, which reads the disk cache first). A later call with other
    argument types compiles a second version without it (the same results, slower).
    Returns the kernel, or for a loop marked by :func:`writes` a call of it through
    :func:`host_args`."""
    marked = getattr(kernel, "reads", None) is not None
    if kernel not in _COMPILED:
        args = host_args(kernel, args)
        old = numba.config.SLP_VECTORIZE
        numba.config.SLP_VECTORIZE = 1
        try:
            kernel.compile(tuple(numba.typeof(a) for a in args))
        finally:
            numba.config.SLP_VECTORIZE = old
        _COMPILED.add(kernel)
    if marked:
        return lambda *a: kernel(*host_args(kernel, a))
    return kernel
