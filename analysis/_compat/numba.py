"""Every use of numba's internals (``numba.core``), in one place, each a small named
function or class.

numba has no public API for what the package does here: load a kernel's cached machine
code without refreshing numba's registries and key it by LLVM's SLP setting too
(:class:`FastLoadCache`, also for a C callback: :func:`cached_cfunc`), check its cache
files before unpickling them (a subclass of :func:`cache_file_class`), start numba's
extensions and runtime on a thread of its own (:func:`compiler_lock`,
:func:`initialise_runtime` and the entry points' flag). Nothing else in ``analysis`` or
``processors`` imports ``numba.core`` (``tests/_compat/test_private_imports.py``); when
a newer numba changes one of these, ``tests/_compat/test_numba.py`` names the attribute
and numba's version.

Importing this module imports ``numba.core.caching`` (loaded by ``import numba``
already); the rest is imported when used, as the callers did before.
"""

from __future__ import annotations

import os
from typing import Any

import numba
from numba.core.caching import FunctionCache, IndexDataCacheFile

from analysis._compat import CompatError, lookup

__all__ = [
    "PRIVATE",
    "CompatError",
    "FastLoadCache",
    "cache_file_class",
    "cache_subpath",
    "cached_cfunc",
    "claim_entry_points",
    "compiler_lock",
    "entry_points_flag",
    "initialise_runtime",
    "keyed_by",
    "run_entry_points",
    "use_fast_load",
]

#: The numba version these names were checked against.
WRITTEN_FOR = "0.68.1"

#: Each name taken from numba's internals: ``name -> (module, attribute, what for)``.
#: Attributes of classes that a subclass here overrides or calls are listed as
#: ``Class.member``.
PRIVATE: dict[str, tuple[str, str, str]] = {
    "FunctionCache": ("numba.core.caching", "FunctionCache", "a kernel's on-disk cache"),
    "FunctionCache.load_overload": ("numba.core.caching", "FunctionCache.load_overload",
                                    "FastLoadCache's fallback"),
    "FunctionCache._load_overload": ("numba.core.caching", "FunctionCache._load_overload",
                                     "FastLoadCache: the load without the registries"),
    "Cache._index_key": ("numba.core.caching", "Cache._index_key",
                         "FastLoadCache: the cache's key, with the SLP vectorizer's setting"),
    "FunctionCache._guard_against_spurious_io_errors": (
        "numba.core.caching", "FunctionCache._guard_against_spurious_io_errors",
        "FastLoadCache: numba's own guard around a load"),
    "IndexDataCacheFile": ("numba.core.caching", "IndexDataCacheFile",
                           "checked cache files (pipeline.backends.numba._numba_cache)"),
    "IndexDataCacheFile.save": ("numba.core.caching", "IndexDataCacheFile.save",
                                "checked cache files: save"),
    "IndexDataCacheFile._load_index": ("numba.core.caching", "IndexDataCacheFile._load_index",
                                       "checked cache files: the index read"),
    "IndexDataCacheFile._save_index": ("numba.core.caching", "IndexDataCacheFile._save_index",
                                       "checked cache files: the index written"),
    "IndexDataCacheFile._load_data": ("numba.core.caching", "IndexDataCacheFile._load_data",
                                      "checked cache files: the data read"),
    "IndexDataCacheFile._save_data": ("numba.core.caching", "IndexDataCacheFile._save_data",
                                      "checked cache files: the data written"),
    "IndexDataCacheFile._data_path": ("numba.core.caching", "IndexDataCacheFile._data_path",
                                      "checked cache files: a data file's path"),
    "IndexDataCacheFile._dump": ("numba.core.caching", "IndexDataCacheFile._dump",
                                 "checked cache files: numba's pickling"),
    "IndexDataCacheFile._open_for_write": (
        "numba.core.caching", "IndexDataCacheFile._open_for_write",
        "checked cache files: numba's atomic write"),
    "_CacheLocator.get_suitable_cache_subpath": (
        "numba.core.caching", "_CacheLocator.get_suitable_cache_subpath",
        "the NUMBA_CACHE_DIR sub-folder of a source folder"),
    "entrypoints.init_all": ("numba.core.entrypoints", "init_all",
                             "numba's extensions' entry points (driver.warmup)"),
    "entrypoints._already_initialized": ("numba.core.entrypoints", "_already_initialized",
                                         "running the entry points but some (driver.warmup)"),
    "global_compiler_lock": ("numba.core.compiler_lock", "global_compiler_lock",
                             "waiting for numba's initialisation (driver.warmup)"),
    "cpu_target": ("numba.core.registry", "cpu_target", "the CPU target's code generator"),
    "rtsys": ("numba.core.runtime", "rtsys", "numba's runtime, initialised before a load"),
    "CFunc": ("numba.core.ccallback", "CFunc", "a C callback built without compiling it "
              "(cached_cfunc)"),
    "CFunc.enable_caching": ("numba.core.ccallback", "CFunc.enable_caching",
                             "cached_cfunc: numba's cache of a C callback"),
    "CFunc.compile": ("numba.core.ccallback", "CFunc.compile",
                      "cached_cfunc: the load (or compilation)"),
    "normalize_signature": ("numba.core.sigutils", "normalize_signature",
                            "cached_cfunc: the signature as numba.cfunc takes it"),
}


def _lookup(name: str) -> Any:
    return lookup(PRIVATE, name, library="numba", written_for=WRITTEN_FOR)


def cache_file_class() -> type:
    """numba's class of a kernel's index and data files (``IndexDataCacheFile``), for a
    subclass that checks them.

    Returns
    -------
    type
        The class.
    """
    return IndexDataCacheFile


def cache_subpath(source: str) -> str | None:
    """The folder, under ``NUMBA_CACHE_DIR``, where numba keeps the cache of the
    sources beside ``source``; ``None`` where this numba names it elsewhere.

    Parameters
    ----------
    source : str
        A source file's path.

    Returns
    -------
    str or None
        The relative folder.
    """
    try:
        return str(_lookup("_CacheLocator.get_suitable_cache_subpath")(source))
    except CompatError:
        return None


class FastLoadCache(FunctionCache):
    """numba's on-disk cache of one kernel, whose loads skip numba's registries.

    numba's ``Cache.load_overload`` first refreshes the CPU target's typing and
    lowering registries (imports of ``numba.np``, ``numba.cpython``, ``numba.typed``...,
    and of ``scipy.linalg`` for numba's BLAS check): ~0.35-0.4 s of a process's first
    cache load, most of the first optimisation step of a second run (issue 35). Cached
    machine code needs none of it: the object code is linked (with its callees', and
    numba's runtime, initialised here) and called through its compiled wrapper.
    numba refreshes the registries itself before anything compiles (its compiler's
    first step), so a miss compiles as before. A load that fails in any way is done
    again numba's own way (registries first), so a numba whose internals differ loads
    as slowly as before, not wrongly. The machine code is the same either way: results
    do not change.

    Its key of a cached version (numba's: the signature, the CPU and the source's
    bytecode) also holds whether LLVM's SLP vectorizer is on (``numba.config.SLP_VECTORIZE``,
    read by numba at each compilation): the kernels compile with it on
    (``analysis.select.lanes.policy.compiled``,
    ``analysis.select.singlekernels``), a test that calls one directly without it, and
    numba's key alone made later runs load that slower machine code (the same floats,
    ~15 % slower); each setting now has its own entry."""

    def _index_key(self, sig, codegen):
        return (*super()._index_key(sig, codegen), ("slp", bool(numba.config.SLP_VECTORIZE)))

    def load_overload(self, sig, target_context):
        try:
            from numba.core.runtime import rtsys

            rtsys.initialize(target_context)  # what the registries' refresh starts first
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except Exception:  # noqa: BLE001  (numba's own load, its own errors)
            return super().load_overload(sig, target_context)


def use_fast_load(cache: Any) -> bool:
    """Make a kernel's numba cache (a dispatcher's ``_cache``) a :class:`FastLoadCache`
    where numba gave it a plain ``FunctionCache`` (the same state, another load).

    Parameters
    ----------
    cache : object
        The dispatcher's cache (``None`` without ``cache=True``).

    Returns
    -------
    bool
        Whether it was switched.
    """
    if type(cache) is FunctionCache:
        cache.__class__ = FastLoadCache
        return True
    return False


def keyed_by(cache: Any, paths: tuple[str, ...]) -> bool:
    """Key a kernel's on-disk cache (a dispatcher's or C callback's ``_cache``) by the
    files ``paths`` too, not only by its own source file: numba stores the source's
    ``(mtime, size)`` in the cache index (``IndexDataCacheFile._source_stamp``) and drops
    the index when it differs, so code inlined from another module (a change there) would
    otherwise load stale. Call it before the kernel first compiles or loads.
    ``tests/select/test_chainwalk.py`` checks that the kernels that need it are keyed.

    Parameters
    ----------
    cache : object
        The kernel's numba cache (``None``: nothing to key).
    paths : tuple of str
        The other source files its machine code depends on.

    Returns
    -------
    bool
        Whether it was keyed (False: a numba without that attribute; the cache is then
        keyed by its own file only, as numba does).
    """
    cache_file = getattr(cache, "_cache_file", None)
    if cache_file is None or not hasattr(cache_file, "_source_stamp"):
        return False
    stamps = []
    for p in paths:
        st = os.stat(p)
        stamps.append((st.st_mtime, st.st_size))
    cache_file._source_stamp = (cache_file._source_stamp, *stamps)
    return True


def cached_cfunc(sig: Any, depends: tuple[str, ...] = ()) -> Any:
    """``numba.cfunc(sig, cache=True)`` whose cached machine code loads through
    :class:`FastLoadCache`: ``numba.cfunc`` compiles (loads) at decoration with numba's
    own cache, whose first load in a process refreshes the registries (1.2-1.7 s of the
    one-set kernels' import at load 5, 0.14 s this way: the first gradient pass of an
    own processor loads them). A miss compiles as ``numba.cfunc`` does.

    Parameters
    ----------
    sig : numba signature
        As ``numba.cfunc``'s.
    depends : tuple of str
        Other source files the callback's machine code inlines (:func:`keyed_by`).

    Returns
    -------
    callable
        The decorator: a function -> numba's ``CFunc`` (``.address``, ``.cache_hits``).
    """
    cfunc_class = _lookup("CFunc")
    signature = _lookup("normalize_signature")(sig)

    def decorate(func: Any) -> Any:
        res = cfunc_class(func, signature, locals={}, options={})
        res.enable_caching()
        keyed_by(res._cache, depends)
        use_fast_load(res._cache)
        res.compile()
        return res

    return decorate


def compiler_lock() -> Any:
    """numba's global compiler lock (held while numba compiles or initialises).

    Returns
    -------
    context manager
        The lock.
    """
    from numba.core.compiler_lock import global_compiler_lock

    return global_compiler_lock


def initialise_runtime() -> None:
    """Initialise numba's runtime for the CPU target (what the first call of a cached
    kernel does).

    Returns
    -------
    None
    """
    from numba.core.registry import cpu_target
    from numba.core.runtime import rtsys

    rtsys.initialize(cpu_target.target_context)


def entry_points_flag() -> bool | None:
    """numba's flag "the extensions' entry points have run"; ``None`` where this numba
    keeps none (then only :func:`run_entry_points` is safe).

    Returns
    -------
    bool or None
        The flag.
    """
    from numba.core import entrypoints

    flag = getattr(entrypoints, "_already_initialized", None)
    return None if flag is None else bool(flag)


def claim_entry_points() -> None:
    """Set numba's flag "the extensions' entry points have run" (before running them,
    as numba does: an extension may compile).

    Returns
    -------
    None
    """
    from numba.core import entrypoints

    entrypoints._already_initialized = True


def run_entry_points() -> None:
    """numba's own ``init_all``: every extension's entry point, once per process.

    Returns
    -------
    None
    """
    from numba.core import entrypoints

    entrypoints.init_all()

