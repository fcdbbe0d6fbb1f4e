"""numba's on-disk cache of this package's kernels, dropped when any kernel source changes.

numba keys a cached function by its own file's modification time and size only: a
change to a function that it calls or inlines from another module
(:func:`analysis.select.lanes.cuts.soft_slope` inlined into the histogram loop of
:mod:`analysis.pipeline.backends.numba.kernels._numba_fill`, say) leaves the caller's old
machine code in use, silently (an editable install after ``git pull``; measured here: a
broken soft-cut product went unseen by the cached histogram loop). So, before numba reads the
first cache file of a kernel (:func:`drop_stale_once`, in :class:`CheckedCacheFile`; not
when a module is imported), :func:`drop_stale` hashes
the sources of every module of the kernels' folder and of :mod:`analysis.select.lanes`
(all of them: the decorators come from one policy module,
:mod:`analysis.select.lanes.policy`, whose change is a change of every kernel); if the hash differs from the one stored beside the
cache, it removes those modules' cache files (numba compiles them again, once) and
stores the new hash. Best effort: a cache
directory it cannot read or write is left to numba. Internal to the pipeline.

Each cache file is also checked before numba reads it (:class:`CheckedCacheFile`,
installed by :func:`install` on every kernel's cache): numba writes its index and
data files as pickles and reads them back as they are, so a bit flipped or a file cut
short (a full disk, a copy interrupted) failed every later run, or loaded corrupt
machine code. Written through :class:`CheckedCacheFile`, each file starts with a
header and the sha256 of its name and content; a file whose digest does not match (or
that has none: written by numba itself, or by an older version of this package), is
not a regular file, or is larger than :data:`MAX_BYTES`, is not read: the kernel is
compiled again and its files rewritten, with one debug line on the
``analysis.pipeline`` logger.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from pathlib import Path
from typing import Any

from analysis._compat import numba as numba_compat
from analysis.limits import read_untrusted
from analysis.runtime.environment import settings
from analysis.select import lanes

__all__: list[str] = []  # internal to analysis.pipeline

STAMP = "diffcoffea-kernels.sha256"


def kernel_modules(package: Path) -> list[Path]:
    """Every module of the kernels' folder, sorted by name: each compiles with numba or is
    read by one that does (helpers inlined elsewhere), so a change to any of them may
    change machine code that numba keys elsewhere."""
    return sorted(p for p in package.glob("*.py") if p.name != Path(__file__).name)


#: The modules every kernel inlines from below the pipeline (the njit policy, the lane
#: arithmetic, the walk's steps): hashed with the kernels' own.
SHARED = Path(lanes.__file__).resolve().parent


def sources_hash(modules: list[Path]) -> str:
    """The sha256 of ``modules`` and of :data:`SHARED`'s modules (names and contents)."""
    h = hashlib.sha256()
    for p in [*modules, *kernel_modules(SHARED)]:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def cache_dirs(package: Path) -> list[Path]:
    """Where numba keeps the package's cache: ``__pycache__`` beside the sources, or the
    directory that ``NUMBA_CACHE_DIR`` gives (numba's own naming of it)."""
    dirs = [package / "__pycache__"]
    numba_dir = settings().numba_cache_dir
    if numba_dir:
        sub = numba_compat.cache_subpath(str(package / "__init__.py"))
        if sub is not None:  # else another numba layout: in-tree only
            dirs.append(Path(numba_dir) / sub)
    return dirs


def drop_stale(package: Path, dirs: list[Path] | None = None) -> list[Path]:
    """Remove the cache files of ``package``'s kernel modules from each of ``dirs``
    (:func:`cache_dirs` by default) whose stored hash is not that of the sources now;
    returns the files removed."""
    try:
        modules = kernel_modules(package)
        digest = sources_hash(modules)
    except OSError:
        return []
    prefixes = tuple(p.stem + "." for p in modules)
    removed = []
    for d in cache_dirs(package) if dirs is None else dirs:
        stamp = d / STAMP
        try:
            if stamp.is_file() and stamp.read_text() == digest:
                continue
            d.mkdir(parents=True, exist_ok=True)  # stamped before numba writes in it
            for f in d.iterdir():
                if f.suffix in (".nbi", ".nbc") and f.name.startswith(prefixes):
                    f.unlink(missing_ok=True)
                    removed.append(f)
            stamp.write_text(digest)
        except OSError:  # read-only or vanished: numba copes on its own
            continue
    return removed


log = logging.getLogger("analysis.pipeline")

#: The header of a checked cache file, before the digest and the content: a pickled
#: string where numba's index has its version, so that a numba without this check (an
#: older version of this package sharing the folder) takes the index for another
#: version's and compiles, instead of failing to unpickle the rest.
MAGIC = pickle.dumps("diffcoffea-numba-cache/1", protocol=4)
#: The largest cache file read (a kernel's object code is ~10-500 kB).
MAX_BYTES = 64 * 2**20


# The files reported unusable in this process (each once).
_REPORTED: set[str] = set()


class _Unusable(OSError):
    """A cache file that is not read (numba's load takes an OSError as "no entry")."""


def _digest(name: str, content: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\0" + content).hexdigest().encode()


def _read_checked(path: str) -> bytes | None:
    """The content of the checked cache file at ``path``; ``None`` where there is none;
    :class:`_Unusable` where it is not a regular file of bounded size, has no header or
    its digest does not match."""
    raw = read_untrusted(path, max_bytes=MAX_BYTES, error=_Unusable)
    if raw is None:
        return None
    head = len(MAGIC) + 64 + 1
    if not raw.startswith(MAGIC) or len(raw) < head:
        raise _Unusable("no checked header (written by another version)")
    digest, content = raw[len(MAGIC):head - 1], raw[head:]
    if digest != _digest(os.path.basename(path), content):
        raise _Unusable("its digest does not match its content")
    return content


class CheckedCacheFile(numba_compat.cache_file_class()):  # type: ignore[misc]
    """numba's index and data files of one kernel, each written with a header and a
    digest and checked before it is unpickled (module docstring)."""

    def _checked(self, path: str) -> bytes | None:
        drop_stale_once()  # the first read of any kernel's cache: stale files gone first
        try:
            return _read_checked(path)
        except _Unusable as why:
            if path not in _REPORTED:  # read again by the save that follows: one line
                _REPORTED.add(path)
                log.debug("numba cache file %s not used: %s; the kernel is compiled again",
                          path, why)
            raise

    def _load_index(self) -> dict:
        try:
            content = self._checked(self._index_path)
        except _Unusable:
            return {}
        if content is None:
            return {}
        try:
            version, stamp, overloads = pickle.loads(content)
        except Exception as err:  # noqa: BLE001 (a digest that matched: numba's own format changed)
            log.debug("numba cache file %s not used: %s", self._index_path, err)
            return {}
        if version != self._version or stamp != self._source_stamp:
            return {}
        return overloads

    def _save_index(self, overloads: dict) -> None:
        content = self._dump((self._version, self._source_stamp, overloads))
        self._write_checked(self._index_path, content)

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
            log.debug("numba cache of %s not written: %s", self._index_path, err)

    def _write_checked(self, path: str, content: bytes) -> None:
        with self._open_for_write(path) as fh:  # numba's: a temporary name, renamed
            fh.write(MAGIC + _digest(os.path.basename(path), content) + b"\n" + content)
        _REPORTED.discard(path)


# Whether this process dropped the stale cache files (empty: not yet).
_DROPPED: list[bool] = []


def drop_stale_once() -> None:
    """:func:`drop_stale` for the kernels' folder, once per process: before numba reads
    the first cache file (:class:`CheckedCacheFile`), not when a module is imported."""
    if not _DROPPED:
        _DROPPED.append(True)
        drop_stale(Path(__file__).resolve().parent / "kernels")


def install(cache: Any) -> None:
    """Make a kernel's numba cache (its ``_cache``; ``None`` for none) load without
    numba's registries (:class:`analysis._compat.numba.FastLoadCache`) and read and
    write checked files (the stale ones dropped before the first is read:
    :func:`drop_stale_once`)."""
    numba_compat.use_fast_load(cache)
    cache_file = getattr(cache, "_cache_file", None)
    if type(cache_file) is numba_compat.cache_file_class():
        cache_file.__class__ = CheckedCacheFile
