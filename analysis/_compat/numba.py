"""Every use of numba's internals (``numba.core``), in one place, each a small named
function or class.

numba has no public API for what the package does here: load a kernel's cached machine
code without refreshing numba's registries and key it by LLVM's SLP setting too
(:class:`FastLoadCache`, also for a C callback: :func:`cached_cfunc`), key it by the
other source files its machine code inlines and check its files before unpickling them
(:class:`CheckedCacheFile`): both through :func:`guard_cache`, which every cached kernel
of the package goes through (the njit policy, :mod:`analysis.select.lanes.policy`, and
:func:`cached_cfunc`); say, once, that kernels compile (:data:`COMPILING`, an INFO
record on the ``analysis._compat.numba`` logger at each cache miss). Starting numba's
extensions and runtime on a thread of its own is :mod:`analysis._compat.numbaruntime`'s
(its names are in :data:`PRIVATE` too). Nothing
else in ``analysis`` or ``processors`` imports ``numba.core``
(``tests/_compat/test_private_imports.py``); when a newer numba changes one of these,
``tests/_compat/test_numba.py`` names the attribute and numba's version.

Importing this module imports ``numba.core.caching`` (loaded by ``import numba``
already); the rest is imported when used, as the callers did before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from typing import Any

import numba
from numba.core.caching import FunctionCache, IndexDataCacheFile

from analysis._compat import CompatError, lookup
from analysis.limits import read_untrusted

__all__ = [
    "MAGIC",
    "MAX_BYTES",
    "PRIVATE",
    "CheckedCacheFile",
    "CompatError",
    "FastLoadCache",
    "COMPILING",
    "COMPILING_KEY",
    "Unusable",
    "cache_home",
    "cached_cfunc",
    "guard_cache",
    "read_checked",
    "sources_digest",
]

#: The numba version these names were checked against.
WRITTEN_FOR = "0.68.1"

#: Each name taken from numba's internals: ``name -> (module, attribute, what for)``.
#: Attributes of classes that a subclass here overrides or calls are listed as
#: ``Class.member`` (the instance attributes that :class:`CheckedCacheFile` reads,
#: ``_source_stamp``, ``_version`` and ``_index_path``, are checked on an instance by
#: ``tests/_compat/test_numba.py``, with the cache's ``_cache_path`` and ``_name`` that
#: the notice of a miss reads). The runtime's and entry points' names are used by
#: :mod:`analysis._compat.numbaruntime`.
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
                           "CheckedCacheFile: a kernel's index and data files"),
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
                loaded = self._load_overload(sig, target_context)
        except Exception:  # noqa: BLE001  (numba's own load, its own errors)
            loaded = super().load_overload(sig, target_context)
        if loaded is None:  # numba compiles it next: the only exact "this will take a while"
            _log.info(COMPILING, cache_home(self),
                      extra={COMPILING_KEY: getattr(self, "_name", "?")})
        return loaded


#: The INFO record of a cache miss (``%s``: :func:`cache_home`); the command line prints
#: the first of a run (:mod:`analysis.cli.compilenote`), other callers see one per kernel
#: where they log at INFO.
COMPILING = ("compiling the numba kernels for this plan (first run, or after the package "
             "changed: a few minutes; later runs load them from the cache in %s)")
#: The attribute of that record holding the kernel's name (what tells it from others).
COMPILING_KEY = "numba_compiling"


def cache_home(cache: Any) -> str:
    """Where numba keeps a kernel's cache, as a user can find it: ``NUMBA_CACHE_DIR``
    where set; the ``__pycache__`` folders beside the sources (numba's default) under
    the folder holding the package; else (a read-only install: numba's folder in the
    user's cache) the kernel's own folder.

    Parameters
    ----------
    cache : numba cache
        The kernel's (its ``_cache_path``: numba's locator's choice).

    Returns
    -------
    str
        The folder, in words.
    """
    if numba.config.CACHE_DIR:
        return str(numba.config.CACHE_DIR)
    path = str(getattr(cache, "_cache_path", ""))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.basename(path) == "__pycache__" and path.startswith(root + os.sep):
        return f"the __pycache__ folders under {root}"
    return path or "numba's cache"


_log = logging.getLogger("analysis._compat.numba")

#: The header of a checked cache file, before the digest and the content: a pickled
#: string where numba's index has its version, so that a numba without this check (an
#: older version of this package sharing the folder) takes the index for another
#: version's and compiles, instead of failing to unpickle the rest.
MAGIC = pickle.dumps("diffcoffea-numba-cache/1", protocol=4)
#: The largest cache file read (a kernel's object code is ~10-500 kB).
MAX_BYTES = 64 * 2**20

# The files reported unusable in this process (each once).
_REPORTED: set[str] = set()
# The digest of each tuple of sources a kernel depends on, read once per process: the
# sources of a process's imported kernels do not change under it.
_DIGESTS: dict[tuple[str, ...], str] = {}


class Unusable(OSError):
    """A cache file that is not read (numba's load takes an OSError as "no entry")."""


def _digest(name: str, content: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\0" + content).hexdigest().encode()


def read_checked(path: str) -> bytes | None:
    """The content of the checked cache file at ``path``.

    Parameters
    ----------
    path : str
        The file.

    Returns
    -------
    bytes or None
        Its content after the header and digest; ``None`` where there is no file.

    Raises
    ------
    Unusable
        Where it is not a regular file of at most :data:`MAX_BYTES`, has no header or
        its digest does not match (its name and content).
    """
    raw = read_untrusted(path, max_bytes=MAX_BYTES, error=Unusable)
    if raw is None:
        return None
    head = len(MAGIC) + 64 + 1
    if not raw.startswith(MAGIC) or len(raw) < head:
        raise Unusable("no checked header (written by another version)")
    digest, content = raw[len(MAGIC):head - 1], raw[head:]
    if digest != _digest(os.path.basename(path), content):
        raise Unusable("its digest does not match its content")
    return content


def sources_digest(paths: tuple[str, ...]) -> str:
    """The sha256 of the source files ``paths`` (each one's name and content, in order),
    once per process and tuple. Contents, not numba's ``(mtime, size)`` stamps: a
    checkout or copy that leaves a file as it was keeps the cache (numba compiles every
    kernel again after one, ~60 s), and an edit that keeps the size within the stamp's
    time resolution is still seen; reading and hashing the ~25 files costs ~1 ms.

    Parameters
    ----------
    paths : tuple of str
        The files.

    Returns
    -------
    str
        The hex digest; where a file cannot be read, one that matches no stored key
        (the kernel compiles).
    """
    digest = _DIGESTS.get(paths)
    if digest is None:
        h = hashlib.sha256()
        try:
            for p in paths:
                with open(p, "rb") as fh:
                    h.update(os.path.basename(p).encode() + b"\0" + fh.read() + b"\0")
            digest = h.hexdigest()
        except OSError as err:
            _log.debug("kernel source unreadable (%s): its kernels compile", err)
            digest = "unread " + os.urandom(8).hex()
        _DIGESTS[paths] = digest
    return digest


class CheckedCacheFile(IndexDataCacheFile):
    """numba's index and data files of one kernel: each written with a header and the
    sha256 of its name and content, and checked before it is unpickled; the index keyed
    by the contents of :attr:`depends` too.

    numba keys a kernel's index by its own file's ``(mtime, size)`` only: code inlined
    from another module (a soft-cut rule of :mod:`analysis.select.lanes` inlined into a
    histogram loop) loaded stale after that module changed (measured: a broken soft-cut
    product went unseen by the cached loop). Here the key is numba's and
    :func:`sources_digest` of :attr:`depends`: an index of other sources is not used;
    the kernel compiles and its files are rewritten.

    numba writes its files as pickles and reads them back as they are, so a bit flipped
    or a file cut short (a full disk, a copy interrupted) failed every later run, or
    loaded corrupt machine code. A file whose digest does not match (or that has none:
    written by numba itself, or by an older version of this package), is not a regular
    file, or is larger than :data:`MAX_BYTES`, is not read (:func:`read_checked`): the
    kernel compiles again and its files are rewritten, with one debug line on the
    ``analysis._compat.numba`` logger. A file that cannot be written (a full disk, a
    read-only folder) leaves the kernel uncached, with one debug line."""

    #: The other source files the kernel's machine code depends on (:func:`guard_cache`).
    depends: tuple[str, ...] = ()

    def _key(self) -> tuple:
        return (self._source_stamp, sources_digest(self.depends))

    def _checked(self, path: str) -> bytes | None:
        try:
            return read_checked(path)
        except Unusable as why:
            if path not in _REPORTED:  # read again by the save that follows: one line
                _REPORTED.add(path)
                _log.debug("numba cache file %s not used: %s; the kernel is compiled again",
                           path, why)
            raise

    def _load_index(self) -> dict:
        try:
            content = self._checked(self._index_path)
        except Unusable:
            return {}
        if content is None:
            return {}
        try:
            version, key, overloads = pickle.loads(content)
        except Exception as err:  # noqa: BLE001 (a digest that matched: numba's own format changed)
            _log.debug("numba cache file %s not used: %s", self._index_path, err)
            return {}
        if version != self._version or key != self._key():
            return {}
        return overloads

    def _save_index(self, overloads: dict) -> None:
        self._write_checked(self._index_path,
                            self._dump((self._version, self._key(), overloads)))

    def _load_data(self, name: str) -> Any:
        content = self._checked(self._data_path(name))
        if content is None:
            raise FileNotFoundError(name)
        return pickle.loads(content)

    def _save_data(self, name: str, data: Any) -> None:
        self._write_checked(self._data_path(name), self._dump(data))

    def save(self, key: Any, data: Any) -> None:
        try:
            super().save(key, data)
        except OSError as err:  # a full disk, a read-only folder: the kernel runs uncached
            _log.debug("numba cache of %s not written: %s", self._index_path, err)

    def _write_checked(self, path: str, content: bytes) -> None:
        with self._open_for_write(path) as fh:  # numba's: a temporary name, renamed
            fh.write(MAGIC + _digest(os.path.basename(path), content) + b"\n" + content)
        _REPORTED.discard(path)


def guard_cache(cache: Any, depends: tuple[str, ...] = ()) -> bool:
    """Make a kernel's numba cache (a dispatcher's or C callback's ``_cache``) the
    package's: loaded without numba's registries (:class:`FastLoadCache`), its files
    checked and its index keyed by the sources ``depends`` too
    (:class:`CheckedCacheFile`). Call it before the kernel first compiles or loads;
    every cached kernel of the package goes through it
    (``tests/pipeline/backends/numba/test_numba_cache.py``,
    ``tests/select/test_singlekernel_cache.py``).

    Parameters
    ----------
    cache : object
        The kernel's numba cache (``None``: nothing to do).
    depends : tuple of str
        The other source files its machine code inlines or links (numba keys it by its
        own file).

    Returns
    -------
    bool
        Whether its files are checked and keyed (False: a numba whose cache differs;
        the cache is then numba's own).
    """
    if type(cache) is FunctionCache:
        cache.__class__ = FastLoadCache
    cache_file = getattr(cache, "_cache_file", None)
    if type(cache_file) not in (IndexDataCacheFile, CheckedCacheFile):
        return False
    cache_file.__class__ = CheckedCacheFile
    cache_file.depends = tuple(depends)
    return True


def cached_cfunc(sig: Any, depends: tuple[str, ...] = ()) -> Any:
    """``numba.cfunc(sig, cache=True)`` whose cache is the package's
    (:func:`guard_cache`): ``numba.cfunc`` compiles (loads) at decoration with numba's
    own cache, whose first load in a process refreshes the registries (1.2-1.7 s of the
    one-set kernels' import at load 5, 0.14 s this way: the first gradient pass of an
    own processor loads them). A miss compiles as ``numba.cfunc`` does.

    Parameters
    ----------
    sig : numba signature
        As ``numba.cfunc``'s.
    depends : tuple of str
        Other source files the callback's machine code inlines or links.

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
        guard_cache(res._cache, depends)
        res.compile()
        return res

    return decorate
