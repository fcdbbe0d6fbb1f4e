"""The output directory: checked before any computation, and locked for one run at a time.

:func:`claim_output` makes sure the directory can hold the results (it is, or can be
created as, a writable directory whose path components are not too long) and takes
a lock file ``.diffcoffea.lock`` in it, holding the PID, host and command of the run.
A second run into the same directory fails with one line naming the holder. A lock
left by a process that no longer exists (same host) is taken over. Acquiring and
releasing are serialised with ``flock`` on the lock file, held only for those few
microseconds, so no worker process ever inherits a held lock. The lock file is opened
with ``O_NOFOLLOW``: a symlink planted at its path is refused (one line), never
written through; a lock whose content is not a run's JSON with a valid PID is
reported as unreadable.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from analysis.errors import DiffcoffeaError
from analysis.jsonsafe import parse_json

__all__ = ["LOCK", "LOCK_WAIT_S", "OutputError", "check_output_dir", "claim_output", "inside"]

LOCK = ".diffcoffea.lock"
PID_MAX = 2**22  # Linux's largest possible pid_max
#: Longest wait for the lock file's flock (our runs hold it for microseconds; another
#: process holding it longer is reported at once, then refused after this many seconds).
LOCK_WAIT_S = 30.0
_HELD: set[str] = set()  # lock files held by this process


class OutputError(DiffcoffeaError):
    """The output directory is unusable or in use by another run."""


def _exists(path: Path) -> bool:
    try:
        os.stat(path)
    except (OSError, ValueError):
        return False
    return True


def _name_max(path: Path) -> int:
    try:
        return os.pathconf(path, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def check_output_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` if needed and check that it is a writable directory; return it.

    Raises :class:`OutputError` (one line) if a component is too long, a file is in the
    way, or the directory cannot be created or written to.
    """
    out = Path(path)
    existing = next((p for p in out.absolute().parents if _exists(p)), Path("/"))
    limit = _name_max(existing)
    for part in out.parts:
        if len(os.fsencode(part)) > limit:
            raise OutputError(
                f"output directory {out}: name {part[:20]!r}... is {len(os.fsencode(part))} "
                f"bytes, longer than the {limit} the file system allows"
            )
    if len(os.fsencode(str(out.absolute()))) >= 4096:  # PATH_MAX on Linux
        raise OutputError(f"output directory {out}: path longer than 4096 bytes")
    for p in [out, *out.parents]:
        if _exists(p) and not p.is_dir():
            raise OutputError(f"output directory {out}: {p} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as err:  # ValueError: an embedded NUL byte
        reason = getattr(err, "strerror", None) or str(err)
        raise OutputError(f"output directory {out!s}: cannot create: {reason}") from None
    probe = out / f".diffcoffea-probe-{os.getpid()}"
    try:  # os.access is not enough (root, ACLs, read-only mounts): really write
        with contextlib.suppress(FileNotFoundError):
            probe.unlink()  # a leftover (or a planted symlink): never written through
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        probe.unlink()
    except OSError as err:
        raise OutputError(f"output directory {out}: not writable: {err.strerror}") from None
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, belongs to someone else
        return True
    return True


def inside(outdir: str | os.PathLike, name: str) -> Path:
    """``outdir / name`` if it resolves inside ``outdir`` (and ``name`` is one plain file
    name); else :class:`OutputError` in one line. The config's names are checked at load
    (:mod:`analysis.config.names`); this is the second line of defence for every file a
    name becomes."""
    base = Path(outdir).resolve()
    path = base
    plain = "\0" not in name and os.sep not in name and name not in ("", ".", "..")
    if plain:
        try:
            path = (base / name).resolve()
        except (OSError, ValueError):
            plain = False
    if not plain or path.parent != base:
        raise OutputError(f"{outdir}: refusing to write {name[:80]!r}: not a plain file name "
                          "inside the output directory")
    return path


def _lock_wait(fd: int, path: Path, wait_s: float) -> None:
    """Take the exclusive flock of ``fd``; if another process holds it, say so in one line
    on stderr and wait up to ``wait_s`` seconds, then refuse in one line."""
    import sys

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    print(f"diffcoffea: waiting for {path}: another process holds its lock (flock); "
          f"giving up after {wait_s:g} s", file=sys.stderr, flush=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(min(0.05, wait_s))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue
    raise OutputError(f"{path}: another process has held the lock (flock) for more than "
                      f"{wait_s:g} s; is another run stuck? delete the lock file if none runs")


@contextlib.contextmanager
def _flocked(path: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[int]:
    """An fd of ``path`` (created if needed) under an exclusive flock, same inode as the
    path (waited on for at most ``wait_s`` seconds: :func:`_lock_wait`)."""
    while True:
        # never follow a symlink planted at the lock's path (it would be written through),
        # never wait on a FIFO planted there
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644)
        except OSError as err:
            if err.errno == errno.ELOOP or os.path.islink(path):
                raise OutputError(f"{path}: the lock file is a symlink (to "
                                  f"{os.readlink(path)}); not followed: delete it") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OutputError(f"{path}: the lock file is not a regular file; delete it")
        try:
            _lock_wait(fd, path, wait_s)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:  # released (unlinked) while we waited
                same = False
            if same:
                yield fd
                return
        finally:
            os.close(fd)  # closing releases the flock


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:  # strict (each key once): a lock with two pids is nobody's
        info = parse_json(raw, "lock", error=ValueError) if raw.strip() else {}
    except ValueError:
        info = {"pid": None}
    if not isinstance(info, dict):
        return {"pid": None}
    pid = info.get("pid")
    # a PID is a positive int below the kernel's largest pid_max (2**22); anything else
    # (2**70, a bool, a string) is a lock nobody wrote: reported, never passed to kill()
    if "pid" in info and not (type(pid) is int and 0 < pid <= PID_MAX):
        info["pid"] = None
    return info


def _acquire(lock: Path, me: dict, key: str, out: Path, wait_s: float) -> None:
    """Write ``me`` into the lock file unless a live run holds it (see :func:`claim_output`)."""
    with _flocked(lock, wait_s) as fd:
        held = _read(fd)
        pid = held.get("pid")
        # Our own PID: a run of this process still holds it, or a dead process's lock
        # whose PID was reused for us (containers reuse PIDs often): take that over.
        ours = pid == me["pid"] and held.get("host") == me["host"] and key not in _HELD
        if held and not ours:
            if not isinstance(pid, int):
                raise OutputError(f"{lock}: unreadable lock file (not the JSON of a run with "
                                  f"a valid pid); delete it if no run uses {out}")
            if held.get("host") != me["host"] or pid == me["pid"] or _alive(pid):
                where = f" on {held.get('host')}" if held.get("host") != me["host"] else ""
                raise OutputError(
                    f"output directory {out} is in use by another run (pid {pid}{where}, "
                    f"{held.get('command', '?')} since {held.get('started', '?')}); "
                    f"use another --output, or delete {lock} if that run is gone"
                )
            # else: a stale lock of a dead process; taken over below
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(me).encode())


@contextlib.contextmanager
def claim_output(path: str | os.PathLike, *, command: str = "run",
                 lock_wait_s: float = LOCK_WAIT_S) -> Iterator[Path]:
    """Check the output directory and hold its lock for the duration of the ``with`` block
    (``lock_wait_s``: the longest wait for another process's flock of the lock file)."""
    out = check_output_dir(path)
    lock = out / LOCK
    key = str(lock.resolve())
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        _acquire(lock, me, key, out, lock_wait_s)
    except OSError as err:
        raise OutputError(f"{lock}: cannot take the lock: {err.strerror or err}") from None
    _HELD.add(key)
    try:
        yield out
    finally:
        _HELD.discard(key)
        if lock.exists():  # (deleted by hand: nothing to release, do not recreate it)
            with contextlib.suppress(OSError, OutputError), _flocked(lock, lock_wait_s) as fd:
                if _read(fd).get("pid") == me["pid"]:
                    os.unlink(lock)
