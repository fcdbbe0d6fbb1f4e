"""Compiled chunk programs kept on disk, found by the chunk function's structure.

JAX's persistent compilation cache keeps the compiled code, but finding it needs the
program's text: each new process traces and lowers ``fn`` with its derivatives again
(seconds for a processor's function under ``jax.jacfwd``) before it can load it. The
programs of :func:`analysis.stats._compiled.compiled_call` are instead stored here as
compiled executables (``jax.experimental.serialize_executable``: machine code for this
host, as JAX's persistent cache stores them; ``jax.export``'s portable StableHLO where
an executable cannot be serialized), under a key made of what decides the program, so
that a new process (a later job, a futures or dask worker) loads them without tracing
``fn``. A loaded executable runs at once; an exported program is lowered and compiled
again (a persistent-cache hit) and, on CPU, first initialises JAX's LAPACK bindings (an
import of scipy.linalg): measured on the README processor's 50k-event chunks (load
3-3.5), a new process's first chunk 300-530 ms -> 180-340 ms. An executable that
JAX's persistent cache answered (its compilation already there, this file not: another
version of this package) is stored in the portable form: re-serialized, it lacks its
kernels. The key:

* the structure of :func:`analysis.stats._closure.closure_inputs` (the code objects of
  ``fn`` and of the functions it closes over, by their bytecode, names and constants; numbers and strings; the
  bucketed shapes and dtypes of the arrays; importable objects by module and name),
  the parameter structure and the options;
* the content of the source file of every code object and of every module named in the
  structure (a helper function that ``fn`` calls by its global name is guarded by its
  module's file, as numba's cache guards a function by its own file);
* the sources of this package (``analysis/``, by path, size and modification time);
* the versions of JAX and jaxlib, ``jax_enable_x64``, the backend, its platform version
  and its device kind, ``XLA_FLAGS``, and the processor (model and instruction set
  extensions: an executable is machine code for them, so that a cache directory shared
  by different machines never hands one another's code).

Anything in the structure that has no stable description (an object without a module
and name) stores nothing: the program is then traced in each process as before. The
files live in ``diffcoffea-programs/`` inside JAX's persistent compilation cache
directory (:mod:`analysis.compilecache`; none when that cache is off), written to a
temporary name and renamed (concurrent workers never read half a file). A file that
cannot be read or loaded is ignored (the program is traced and compiled again).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pickle
import platform
import tempfile
import threading
import types
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.experimental import serialize_executable

__all__: list[str] = []

SUBDIR = "diffcoffea-programs"
#: The first field of a file that holds a compiled executable (else a jax.export form).
EXECUTABLE = "executable"

_FILES: dict[tuple[str, int, int], str] = {}
# Persistent-cache hits of each thread's compilations (:func:`_cache_hits`), counted by a
# jax.monitoring listener registered once per process.
_HITS = threading.local()
_LISTENING: list[bool] = []
_STAMP: list[str] = []
# Custom-call targets that this package registers in every process that can run its
# programs (:func:`allow_custom_calls`): jax.export refuses any other.
_CUSTOM_CALLS: set[str] = set()
# Registrations of custom-call targets deferred until a stored program may call them
# (the targets' kernels load numba: a process that never loads such a program, or
# traces its functions first, does not pay for it before they run).
_PROVIDERS: list[Callable[[], Any]] = []


def allow_custom_calls(*names: str, register: Callable[[], Any] | None = None) -> None:
    """Let the portable form hold calls of these custom-call targets.

    Parameters
    ----------
    *names : str
        The targets' names, as the programs call them.
    register : callable, keyword-only, optional
        Registers the targets with XLA; called (once) before this process loads a
        stored program, which may call them without being traced here. None: they are
        registered already.
    """
    _CUSTOM_CALLS.update(names)
    if register is not None:
        _PROVIDERS.append(register)


def _provide() -> None:
    """Run the deferred registrations (:func:`allow_custom_calls`), once each."""
    while _PROVIDERS:
        _PROVIDERS.pop()()


class _Unstable(Exception):
    """A part of the structure without a description that holds across processes."""


def _file_hash(path: str | None) -> str:
    if not path:
        return "-"
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    key = (path, st.st_mtime_ns, st.st_size)
    got = _FILES.get(key)
    if got is None:
        try:
            with open(path, "rb") as fh:
                got = hashlib.sha256(fh.read()).hexdigest()
        except OSError:
            got = "unreadable"
        _FILES[key] = got
    return got


def _named(obj: Any) -> bytes:
    module = getattr(obj, "__module__", None) if not isinstance(obj, types.ModuleType) \
        else obj.__name__
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not isinstance(module, str) or not isinstance(name, str):
        raise _Unstable
    try:  # imported now if not yet: the description must not depend on what was imported
        mod = importlib.import_module(module)
    except Exception:
        raise _Unstable from None
    return f"{module}:{name}:{_file_hash(getattr(mod, '__file__', None))}".encode()


def _describe(obj: Any, out: list[bytes]) -> None:
    if isinstance(obj, (tuple, list)):
        out.append(b"(" if isinstance(obj, tuple) else b"[")
        for x in obj:
            _describe(x, out)
            out.append(b",")
        out.append(b")")
    elif obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, np.generic)):
        out.append(f"{type(obj).__name__}:{obj!r}".encode())
    elif isinstance(obj, types.CodeType):
        # by its parts (marshal's bytes depend on reference counts)
        out.append(b"code:" + obj.co_code + repr((
            obj.co_names, obj.co_varnames, obj.co_freevars, obj.co_cellvars, obj.co_name,
            obj.co_argcount, obj.co_kwonlyargcount, obj.co_posonlyargcount, obj.co_flags,
            obj.co_firstlineno, _file_hash(obj.co_filename))).encode())
        _describe(obj.co_consts, out)
    elif isinstance(obj, jax.tree_util.PyTreeDef):
        out.append(f"tree:{obj}".encode())
    elif isinstance(obj, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)) \
            or callable(obj):
        out.append(b"obj:" + _named(obj))
    else:
        raise _Unstable


def _config() -> Any:
    return jax.config  # its flags are attributes that type stubs do not list


def _stamp() -> str:
    """What every stored program depends on besides its structure (module docstring)."""
    if not _STAMP:
        import jaxlib

        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        files = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
            for name in sorted(names):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(folder, name))
                    files.append(f"{os.path.relpath(os.path.join(folder, name), root)}:"
                                 f"{st.st_size}:{st.st_mtime_ns}")
        device = jax.devices()[0]
        parts = [jax.__version__, jaxlib.__version__, str(_config().jax_enable_x64),
                 device.platform, device.client.platform_version, device.device_kind,
                 os.environ.get("XLA_FLAGS", ""), _processor(), *files]
        _STAMP.append(hashlib.sha256("\n".join(parts).encode()).hexdigest())
    return _STAMP[0]


def _processor() -> str:
    """The host's processor (model and instruction set extensions, from
    ``/proc/cpuinfo`` where there is one): a stored executable is machine code for it."""
    try:
        with open("/proc/cpuinfo") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return f"{platform.machine()}:{platform.processor()}"
    keep = ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part")
    return "\n".join(sorted({ln for ln in lines if ln.split(":")[0].strip() in keep}))


def directory() -> str | None:
    """Where programs are stored: inside JAX's persistent cache directory, or ``None``."""
    base = _config().jax_compilation_cache_dir
    return os.path.join(base, SUBDIR) if base else None


def path_for(key: Any) -> str | None:
    """The file of the program with this key, or ``None`` (no cache directory, or a
    key without a stable description)."""
    where = directory()
    if where is None:
        return None
    out: list[bytes] = []
    try:
        _describe(key, out)
    except _Unstable:
        return None
    digest = hashlib.sha256(_stamp().encode() + b"\0" + b"".join(out)).hexdigest()
    return os.path.join(where, digest + ".bin")


def load(path: str) -> Callable[..., Any] | None:
    """The stored program at ``path`` (called with the arguments it was exported for,
    it returns the pytree ``fn`` returned), or ``None``."""
    try:
        with open(path, "rb") as fh:
            stored = pickle.loads(fh.read())
        _provide()  # its custom calls, registered before the executable is made
        if stored[0] == EXECUTABLE:
            _, payload, in_flat, out_flat, out_tree = stored
            return _compiled_program(
                serialize_executable.deserialize_and_load(payload, in_flat, out_flat), out_tree)
        payload, out_tree = stored
        exported = jax.export.deserialize(bytearray(payload))
    except Exception:  # absent, half-written by an older version, another jaxlib: trace
        return None
    return _program(exported, out_tree)


def _program(exported: Any, out_tree: Any) -> Callable[..., Any]:
    call = jax.jit(exported.call)

    def program(*args: Any) -> Any:
        return jax.tree_util.tree_unflatten(out_tree, call(*jax.tree_util.tree_leaves(args)))

    return program


def _compiled_program(compiled: Any, out_tree: Any) -> Callable[..., Any]:
    def program(*args: Any) -> Any:
        return jax.tree_util.tree_unflatten(out_tree, compiled(*jax.tree_util.tree_leaves(args)))

    return program


def _write(path: str, data: bytes) -> None:
    """``data`` to ``path`` through a temporary name (readers never see half a file)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _on_event(event: str, **kwargs: Any) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _HITS.count = getattr(_HITS, "count", 0) + 1


def _cache_hits() -> int:
    """How many compilations of this thread JAX's persistent cache has answered."""
    if not _LISTENING:
        _LISTENING.append(True)
        jax.monitoring.register_event_listener(_on_event)
    return int(getattr(_HITS, "count", 0))


def export(run: Callable[..., Any], args: tuple, path: str | None, *,
           fresh: bool = False) -> Callable[..., Any]:
    """``run`` compiled for ``args`` (traced, lowered and compiled once) as a program,
    written to ``path`` (when not ``None``; silently nothing where it cannot be
    serialized or written): the compiled executable, else the ``jax.export`` form.
    ``fresh``: the program is named after ``path`` (its module is then one no other
    key shares; if JAX's persistent cache still answers it, the key compiled before,
    a name of its own), so that JAX's cache never hands an executable that would have
    to be stored in the portable form (a program compiled once per key instead:
    cheap for :func:`stored_call`'s small programs, where the portable form cost a new
    process 2-3 s to lower and compile again)."""
    tree: list = []
    in_leaves, in_tree = jax.tree_util.tree_flatten(args)

    def flat(*leaves: Any) -> Any:  # flat in and out: no pytree types to serialize
        out, out_tree = jax.tree_util.tree_flatten(run(*jax.tree_util.tree_unflatten(in_tree, leaves)))
        tree.append(out_tree)
        return out

    # Lowered and compiled directly: calling a jax.export'ed program lowers it again
    # and, on CPU, initialises JAX's LAPACK bindings (an import of scipy.linalg), 0.3 s
    # of a new process's first chunk that a program without linear algebra never needs.
    hits = _cache_hits()
    if fresh and path is not None:  # jit names the module after the function
        flat.__name__ = flat.__qualname__ = "stored_" + os.path.basename(path)[:16]
    compiled = jax.jit(flat).lower(*in_leaves).compile()
    if fresh and path is not None and _cache_hits() != hits:
        # this key compiled before (its file since removed, or written by another
        # process): a name no cache entry has
        flat.__name__ = flat.__qualname__ = f"{flat.__name__}_{os.urandom(4).hex()}"
        hits = _cache_hits()
        compiled = jax.jit(flat).lower(*in_leaves).compile()
    out_tree = tree[-1]
    if path is not None:
        try:
            # An executable that JAX read from its persistent cache serializes without
            # its kernels (a new process that loads it fails: "Function ... not found"):
            # then the portable form.
            if _cache_hits() != hits:
                raise ValueError("an executable from JAX's persistent cache")
            payload, in_flat, out_flat = serialize_executable.serialize(compiled)
            _write(path, pickle.dumps((EXECUTABLE, payload, in_flat, out_flat, out_tree)))
        except Exception:  # an executable that cannot be serialized: the portable form
            try:
                checks = [jax.export.DisabledSafetyCheck.custom_call(name)
                          for name in sorted(_CUSTOM_CALLS)]
                exported = jax.export.export(jax.jit(flat), disabled_checks=checks)(*in_leaves)
                _write(path, pickle.dumps((exported.serialize(), out_tree)))
            except Exception:  # flatbuffers missing, a read-only directory: in memory only
                pass
    return _compiled_program(compiled, out_tree)


# Programs of package functions by (name, options, argument structure and shapes): in
# this process, else from disk, else exported and stored (:func:`stored_call`).
_CALLS: dict[Any, Callable[..., Any]] = {}
# str(dtype) by dtype: numpy's str of a dtype costs ~10 us, and the merge of two
# states with systematics asks it for ~230 leaves (7 ms of a 0.3 s pass)
_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(x: Any) -> str:
    """``str(np.result_type(x))``, kept per dtype of ``x`` (the result type of one array
    or numpy scalar depends on its dtype only)."""
    # JAX arrays too: merged states stay JAX arrays until read (analysis.stats.derived)
    if not isinstance(x, np.ndarray | np.generic | jax.Array):
        return str(np.result_type(x))
    name = _DTYPE_NAMES.get(x.dtype)
    if name is None:
        name = _DTYPE_NAMES[x.dtype] = str(np.result_type(x))
    return name


def stored_call(name: str, fun: Callable[..., Any], *args: Any, **options: Any) -> Any:
    """``fun(*args, **options)`` (``fun`` a function of this package, ``options``
    hashable), compiled once per argument structure and shapes and kept on disk like
    the chunk programs (always as a compiled executable: :func:`export`'s ``fresh``),
    so that a new process does not trace it again."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    shapes = tuple((np.shape(x), _dtype_name(x)) for x in leaves)
    key = (name, tuple(sorted(options.items())), tree, shapes)
    program = _CALLS.get(key)
    if program is None:
        path = path_for(key)
        program = load(path) if path is not None else None
        if program is None:
            program = export(lambda *a: fun(*a, **options), args, path, fresh=True)
        _CALLS[key] = program
    return program(*args)
