"""The file format of :mod:`analysis.stats._stored`'s programs: untrusted input until
authenticated.

A stored program is machine code, and JAX's serialization of an executable is a
pickle (``jax.experimental.serialize_executable``: "not safe to call with untrusted
inputs"), so nothing of a file is unpickled or loaded before it is authenticated:

* the file is opened without following links and without blocking, must be a regular
  file of at most :data:`MAX_BYTES`;
* it starts with :data:`MAGIC`, then the HMAC-SHA256 of the rest, keyed by this user's
  secret (:func:`key_`: a random key in ``$XDG_CONFIG_HOME/diffcoffea/programs.key``,
  readable by this user alone, never in the cache folder) and the entry's name (an
  entry copied over another's name, a bit flipped, a file cut short, or one planted by
  anyone else who can write to the cache folder fails it);
* then a JSON header (the format, the length of the pickled tree structures, the
  custom-call targets that the program calls and the modules that register them) and
  the body.

Before an executable is loaded, every custom-call target it calls is registered with
XLA (:func:`ready_for`): machine code that calls one not registered yet in this
process crashed it (a second ``optimize`` of ``agc_likelihood.yaml``: exit 139 in
LAPACK's ``tf_XLAEigen``). A file that fails any of this is compiled again, with one
debug line on the ``analysis.stats`` logger.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json
import logging
import os
import pickle
import re
import stat
import struct
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from analysis.limits import read_untrusted

__all__: list[str] = []

#: The format of a file that holds a compiled executable (else a jax.export form).
EXECUTABLE = "executable"
#: The first bytes of a stored program's file; then the HMAC, a header and the body.
MAGIC = b"diffcoffea-program/2\n"
#: The largest stored program read (the objective's executables are ~200 kB).
MAX_BYTES = 256 * 2**20
# Custom-call targets that this package registers in every process that can run its
# programs (:func:`allow_custom_calls`; name -> the module whose import registers it):
# jax.export refuses any other.
_CUSTOM_CALLS: dict[str, str | None] = {}
# Modules that register custom-call targets, read from the headers (name -> module).
_MODULES: dict[str, str] = {}
_KEY: list[bytes | None] = []
_LINALG_READY: list[bool] = []
log = logging.getLogger("analysis.stats")
_TARGET = re.compile(rb'custom_call_target="([^"]+)"')


# Registrations of custom-call targets deferred until a stored program may call them
# (the targets' kernels load numba: a process that never loads such a program, or
# traces its functions first, does not pay for it before they run).
_PROVIDERS: list[Callable[[], Any]] = []


def allow_custom_calls(*names: str, module: str | None = None,
                       register: Callable[[], Any] | None = None) -> None:
    """Let the portable form hold calls of these custom-call targets.

    Parameters
    ----------
    *names : str
        The targets' names, as the programs call them.
    module : str, keyword-only, optional
        The module whose import registers them: a new process imports it before it
        loads a stored program that calls them (named in the program's header).
    register : callable, keyword-only, optional
        Registers the targets with XLA; called (once) before this process loads a
        stored program, which may call them without being traced here. None: they are
        registered already (or by ``module``'s import).
    """
    for name in names:
        if module is not None or name not in _CUSTOM_CALLS:
            _CUSTOM_CALLS[name] = module
    if register is not None:
        _PROVIDERS.append(register)


def _provide() -> None:
    """Run the deferred registrations (:func:`allow_custom_calls`), once each."""
    while _PROVIDERS:
        _PROVIDERS.pop()()


def key_() -> bytes | None:
    """This user's key of the stored programs' HMAC (module docstring): a random secret
    in ``$XDG_CONFIG_HOME/diffcoffea/programs.key`` (else ``~/.config/...``), made once,
    readable by this user alone; ``None`` where there is none to be had (a read-only
    home): then no program is stored or loaded."""
    if not _KEY:
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        path = os.path.join(base, "diffcoffea", "programs.key")
        key = None
        try:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(os.urandom(32).hex().encode())
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                # another user's or a writable-by-others key would let them forge entries
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() \
                        and not st.st_mode & 0o077:
                    key = fh.read(128).strip() or None
        except OSError as err:
            log.debug(
                "stored programs off: no key at %s (%s)", path, err.strerror)
        _KEY.append(key)
    return _KEY[0]


def _mac(key: bytes, path: str, content: bytes) -> bytes:
    """The HMAC of a file's content, keyed by this user's key and the entry's name (a
    valid entry copied over another's name is refused)."""
    return hmac.new(key, os.path.basename(path).encode() + b"\0" + content,
                    hashlib.sha256).hexdigest().encode()


class Unusable(Exception):
    """A stored program's file that is not used (it is compiled again)."""


def read(path: str, key: bytes) -> tuple[dict, bytes] | None:
    """The header and body of the stored program at ``path``; ``None`` where there is
    none; :class:`Unusable` where it is not a regular file of bounded size, or its
    HMAC does not match (corrupt, truncated, written by another user or under another
    name), before anything of it is unpickled."""
    raw = read_untrusted(path, max_bytes=MAX_BYTES, error=Unusable)
    if raw is None:
        return None
    start = len(MAGIC) + 65
    if not raw.startswith(MAGIC) or len(raw) < start + 8:
        raise Unusable("not a stored program of this version")
    if not hmac.compare_digest(raw[len(MAGIC):start - 1], _mac(key, path, raw[start:])):
        raise Unusable("its HMAC does not match (corrupt, or not written by this user)")
    (size,) = struct.unpack("<Q", raw[start:start + 8])
    try:
        header = json.loads(raw[start + 8:start + 8 + size])
    except ValueError:
        raise Unusable("its header is not JSON") from None
    return header, raw[start + 8 + size:]


def ready_for(targets: list) -> None:
    """Register with XLA every custom-call target a stored program calls, before it is
    loaded (machine code that calls an unregistered one crashes the process): this
    package's by importing the module that registers them, JAX's own (LAPACK, FFT) by
    lowering the operations that register them; :class:`Unusable` for any other."""
    for name in targets:
        if not isinstance(name, str):
            raise Unusable("a custom-call target that is not a name")
        if name not in _CUSTOM_CALLS:
            module = _MODULES.get(name)
            if module is not None and module.startswith("analysis."):
                importlib.import_module(module)
        if name in _CUSTOM_CALLS:
            _provide()  # its deferred registration, before the executable is made
            continue
        if not _LINALG_READY:
            _register_jax_targets()
            _LINALG_READY.append(True)


def _register_jax_targets() -> None:
    """Lower (not compile) linear algebra and an FFT: JAX registers its CPU custom calls
    (LAPACK's, ducc's) with XLA when it first lowers them."""
    a = np.eye(2)

    def uses(a: Any) -> Any:
        return (jax.numpy.linalg.eigh(a), jax.numpy.linalg.solve(a, a), jax.numpy.linalg.svd(a),
                jax.numpy.linalg.cholesky(a), jax.numpy.linalg.qr(a), jax.numpy.linalg.det(a),
                jax.numpy.linalg.eig(a), jax.numpy.linalg.inv(a), jax.numpy.fft.fft(a))

    jax.jit(uses).lower(a)


def stored_bytes(path: str, fmt: str, trees: Any, payload: bytes, targets: list) -> bytes | None:
    """The file of a stored program: :data:`MAGIC`, the HMAC, the header and the body
    (``None`` without a key)."""
    key = key_()
    if key is None:
        return None
    pickled = pickle.dumps(trees)
    header = json.dumps({
        "format": fmt, "trees": len(pickled), "targets": targets,
        "modules": {t: _CUSTOM_CALLS[t] for t in targets if _CUSTOM_CALLS.get(t)},
    }).encode()
    content = struct.pack("<Q", len(header)) + header + pickled + payload
    return MAGIC + _mac(key, path, content) + b"\n" + content


def targets_of(compiled: Any) -> list[str]:
    """The custom-call targets the compiled program calls (from its HLO text)."""
    return sorted({m.decode() for m in _TARGET.findall(compiled.as_text().encode())})


def kind(path: str) -> str | None:
    """The format of the stored program at ``path`` (:data:`EXECUTABLE` or
    ``"exported"``), ``None`` where it is absent or not authentic (for tests)."""
    key = key_()
    try:
        found = read(path, key) if key is not None else None
    except Unusable:
        return None
    return None if found is None else found[0].get("format")
