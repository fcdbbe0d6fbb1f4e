"""numba's on-disk cache of this package's kernels, dropped when any kernel source changes.

numba keys a cached function by its own file's modification time and size only: a
change to a function that it calls or inlines from another module
(:func:`analysis.pipeline.backends.numba.kernels._numba_dp.cut_times` inlined into
:func:`analysis.pipeline.backends.numba.kernels._numba_one.select_one`, say) leaves the caller's old machine
code in use, silently (an editable install after ``git pull``; measured here: a broken
``cut_times`` went unseen by the cached histogram loop). So, when
the numba backend is imported (before any kernel module is), :func:`drop_stale` hashes
the sources of every module of the kernels' folder (all of them: the decorators come
from one policy module, :mod:`analysis.pipeline.backends.numba.kernels._jit`, whose
change is a change of every kernel); if the hash differs from the one stored beside the
cache, it removes those modules' cache files (numba compiles them again, once) and
stores the new hash. Best effort: a cache
directory it cannot read or write is left to numba. Internal to the pipeline.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__: list[str] = []  # internal to analysis.pipeline

STAMP = "diffcoffea-kernels.sha256"


def kernel_modules(package: Path) -> list[Path]:
    """Every module of the kernels' folder, sorted by name: each compiles with numba or is
    read by one that does (the njit policy's module, helpers inlined elsewhere), so a
    change to any of them may change machine code that numba keys elsewhere."""
    return sorted(p for p in package.glob("*.py") if p.name != Path(__file__).name)


def sources_hash(modules: list[Path]) -> str:
    h = hashlib.sha256()
    for p in modules:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def cache_dirs(package: Path) -> list[Path]:
    """Where numba keeps the package's cache: ``__pycache__`` beside the sources, or the
    directory that ``NUMBA_CACHE_DIR`` gives (numba's own naming of it)."""
    dirs = [package / "__pycache__"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        try:
            from numba.core.caching import _CacheLocator

            sub = _CacheLocator.get_suitable_cache_subpath(str(package / "__init__.py"))
            dirs.append(Path(os.environ["NUMBA_CACHE_DIR"]) / sub)
        except (ImportError, AttributeError):  # another numba layout: in-tree only
            pass
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
