"""Atomic, fault-reported writes: the whole file or nothing, and one line when the disk says no.

Every file diffcoffea writes (results.json, scan.json, checkpoint.npz, plots, spilled
cache columns) goes through :func:`atomic_open`: the bytes go to a unique temporary
sibling (same directory, so the rename is atomic), which is flushed, ``fsync``-ed and
renamed over the target only once complete. On any failure the temporary file is
removed and the target is untouched (the last good checkpoint survives a full disk);
an ``OSError`` (``ENOSPC``, ``EACCES``, ``EROFS``, ``EDQUOT``, ...) becomes one
:class:`WriteError` line naming the path and the reason.

Only the standard library.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from analysis.errors import DiffcoffeaError

__all__ = ["WriteError", "atomic_open", "write_atomic"]


class WriteError(DiffcoffeaError):
    """A file could not be written (one line naming the path and the reason)."""


def _reason(err: OSError) -> str:
    name = errno.errorcode.get(err.errno or 0)
    text = err.strerror or str(err)
    return f"{text} ({name})" if name else text


def _temporary(path: Path) -> Path:
    return path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


_open = open  # tests replace it by a file that fills up


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", *, what: str = "file") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; on a clean exit it replaces ``path``.

    ``mode``: ``"wb"`` or ``"w"`` (UTF-8 text). ``what`` names the file in the error
    (``"cannot write {what}: No space left on device (ENOSPC)"``). Any exception inside
    the block, or while finishing, removes the temporary file and leaves ``path`` as it was.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open: mode {mode!r}: expected 'wb' or 'w'")
    path = Path(path)
    tmp = _temporary(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = _open(tmp, mode, **({"encoding": "utf-8"} if mode == "w" else {}))  # noqa: SIM115
        try:
            yield f
            f.flush()
            os.fsync(f.fileno())
        finally:
            f.close()
        os.replace(tmp, path)
    except OSError as err:
        raise WriteError(f"{path}: cannot write {what}: {_reason(err)}") from err
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_atomic(path: str | os.PathLike, data: bytes | str, *, what: str = "file") -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` with :func:`atomic_open`."""
    with atomic_open(path, "w" if isinstance(data, str) else "wb", what=what) as f:
        f.write(data)
