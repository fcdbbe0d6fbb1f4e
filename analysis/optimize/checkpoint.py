"""Data-only optimisation checkpoints: nothing in a checkpoint file can run code.

A checkpoint is one ``.npz`` file (a zip of ``.npy`` arrays, written atomically):

- ``state``: the small state as UTF-8 JSON (a ``uint8`` array): format tag and version,
  config fingerprint and snapshot, trainable parameter names, step, convergence flag,
  history, and the layout of the optimiser state;
- ``u``: the trainable parameters in unit coordinates (``float64``, shape ``(P,)``);
- ``opt_0``, ``opt_1``, ...: the optimiser state's array leaves, in ``jax.tree_util``
  order for an optax state, or in key order for a mapping (the Newton trust-region state;
  ``None`` values are recorded in the JSON and stored as no array).

Reading uses ``allow_pickle=False`` and never unpickles: an optax state is rebuilt from
its leaves with the tree structure of a *fresh* ``optimizer.init`` (the ``like``
argument of :func:`load_checkpoint`), after checking leaf count, shapes and dtypes.
A pickle (the pre-0.2 ``checkpoint.pkl`` format, or a pickle renamed to ``.npz``) is
refused without being loaded. Every problem is one :class:`CheckpointError` line naming
the file and what differs.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import threading
import zipfile
from pathlib import Path
from typing import Any

import jax
import numpy as np

from analysis.data.atomic import atomic_open
from analysis.errors import DiffcoffeaError
from analysis.jsonsafe import parse_json

__all__ = [
    "CHECKPOINT",
    "LEGACY_CHECKPOINT",
    "CheckpointError",
    "CheckpointWriter",
    "checkpoint_bytes",
    "config_change",
    "config_snapshot",
    "load_checkpoint",
    "read_checkpoint",
    "save_checkpoint",
]

CHECKPOINT = "checkpoint.npz"
LEGACY_CHECKPOINT = "checkpoint.pkl"  # the old pickle format: refused, never loaded
FORMAT = "diffcoffea-checkpoint"
VERSION = 1
_MAX_MEMBER = 1 << 28  # 256 MiB per member: a crafted zip cannot make us allocate more
_ZIP_MAGIC = b"PK\x03\x04"


class CheckpointError(DiffcoffeaError):
    """A checkpoint that is missing, unreadable, not data-only, or does not match the run."""


def config_snapshot(config: Any) -> dict[str, Any]:
    """The part of the config a checkpoint depends on (as JSON), for naming what changed."""
    return config.model_dump(mode="json", exclude={"output": True, "executor": True})


# --- writing ----------------------------------------------------------------------


def _layout(state: Any) -> tuple[dict[str, Any], list[np.ndarray]]:
    """JSON description and array leaves of an optimiser state."""
    if type(state) is dict:  # the Newton trust-region state: str -> array | None
        keys = sorted(state)
        present = [k for k in keys if state[k] is not None]
        arrays = [np.asarray(state[k]) for k in present]
        return {"kind": "mapping", "keys": keys, "present": present}, arrays
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(state)]
    return {"kind": "pytree", "n_leaves": len(leaves)}, leaves


def save_checkpoint(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename).

    ``data`` holds ``fingerprint``, ``step``, ``u``, ``opt_state``, ``history``,
    ``converged`` and optionally ``names`` (trainable parameters) and ``config``
    (:func:`config_snapshot`). The history must be JSON data (floats, strings, None).
    """
    _write(Path(path), checkpoint_bytes(data))


def _write(path: Path, payload: bytes) -> None:
    with atomic_open(path, what="checkpoint") as f:  # the last good one survives a full disk
        f.write(payload)


def checkpoint_bytes(data: dict[str, Any]) -> bytes:
    """The ``.npz`` file :func:`save_checkpoint` writes for ``data``, as bytes.

    Parameters
    ----------
    data : dict
        As for :func:`save_checkpoint`.

    Returns
    -------
    bytes
        The file's content.
    """
    layout, leaves = _layout(data["opt_state"])
    state = {
        "format": FORMAT,
        "version": VERSION,
        "fingerprint": data["fingerprint"],
        "config": data.get("config"),
        "names": list(data["names"]) if data.get("names") is not None else None,
        "step": int(data["step"]),
        "converged": bool(data.get("converged", False)),
        "history": data["history"],
        "opt_state": layout,
    }
    # allow_nan: Python's json reads NaN back, so the history round-trips bit for bit.
    text = json.dumps(state, allow_nan=True).encode("utf-8")
    arrays = {"state": np.frombuffer(text, dtype=np.uint8), "u": np.asarray(data["u"], np.float64)}
    arrays.update({f"opt_{i}": leaf for i, leaf in enumerate(leaves)})
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


class CheckpointWriter:
    """Checkpoints written on a thread of their own, one at a time: the file of step
    ``k`` is written (and ``fsync``-ed: ~3 ms a step on a quiet disk, 15 ms at load 5)
    while step ``k + 1``'s pass runs, instead of before it.

    :meth:`submit` takes a snapshot of the data (the history list, ``u`` and the
    optimiser state's arrays copied: the loop appends to the history and replaces the
    rest; the history's entries and the config snapshot must not change after), waits
    for the previous write and starts this one, which serialises the snapshot
    (:func:`checkpoint_bytes`: the history's JSON grows with the steps) and writes it;
    :meth:`wait` waits for the last. A failed write (a full disk:
    :class:`~analysis.data.atomic.WriteError`, the last good checkpoint kept) is raised
    by the next :meth:`submit` or :meth:`wait`.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, path: Path, data: dict[str, Any]) -> None:
        """Write ``data`` to ``path`` (as :func:`save_checkpoint`) on the writer's thread."""
        snapshot = {**data, "history": list(data["history"]), "u": np.array(data["u"]),
                    "opt_state": jax.tree_util.tree_map(np.array, data["opt_state"])}
        self.wait()

        def write() -> None:
            try:
                _write(Path(path), checkpoint_bytes(snapshot))
            except BaseException as err:  # noqa: BLE001  (raised by the next wait)
                self._error = err

        self._thread = threading.Thread(target=write, name="diffcoffea-checkpoint")
        self._thread.start()

    def wait(self, *, raise_error: bool = True) -> None:
        """Wait for the last write; its error raised (``raise_error``) or dropped."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None and raise_error:
            raise error


# --- reading ----------------------------------------------------------------------


def _members(path: Path) -> dict[str, np.ndarray]:
    """All arrays of an ``.npz`` file, refusing pickles, object arrays and oversized members."""
    try:
        # a FIFO (or a device) named checkpoint.npz would block the read forever
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise CheckpointError(f"{path}: not a regular file; a checkpoint is a file")
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no checkpoint to resume from") from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read checkpoint: {err.strerror}") from None
    if head != _ZIP_MAGIC:
        what = "a pickle" if head[:1] == b"\x80" else "not an .npz archive"
        raise CheckpointError(
            f"{path}: not a diffcoffea checkpoint ({what}); refused without loading it"
        )
    out = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                name = info.filename
                if not name.endswith(".npy") or info.file_size > _MAX_MEMBER:
                    raise CheckpointError(f"{path}: unexpected member {name!r} in checkpoint")
                with zf.open(info) as member:
                    raw = io.BytesIO(member.read())
                out[name[:-4]] = np.lib.format.read_array(raw, allow_pickle=False)
    except CheckpointError:
        raise
    except Exception as err:  # zip/npy corruption, object arrays (pickle) refused
        msg = " ".join(str(err).split())[:120]
        raise CheckpointError(
            f"{path}: unreadable checkpoint ({type(err).__name__}: {msg})"
        ) from None
    return out


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The raw content of a checkpoint: the JSON state plus ``u`` and ``leaves`` (arrays).

    Checks only the format, not that it fits a run (see :func:`load_checkpoint`).
    """
    path = Path(path)
    arrays = _members(path)
    if "state" not in arrays or "u" not in arrays:
        raise CheckpointError(f"{path}: not a diffcoffea checkpoint (no 'state' or 'u')")
    raw = arrays["state"]
    try:
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError("state is not UTF-8 bytes")
        state = parse_json(raw.tobytes(), str(path), error=ValueError)  # each key once
    except RecursionError:  # e.g. a history entry nesting 200,000 arrays
        raise CheckpointError(f"{path}: corrupt checkpoint state (JSON nested too deeply)"
                              ) from None
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: corrupt checkpoint state ({err})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a diffcoffea checkpoint (format tag missing)")
    if state.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {state.get('version')!r}, expected {VERSION}"
        )
    _expect(path, state, "step", int)
    _expect(path, state, "history", list)
    _expect(path, state, "opt_state", dict)
    _expect(path, state, "fingerprint", str)
    if state["step"] < 0 or len(state["history"]) != state["step"]:
        raise CheckpointError(
            f"{path}: corrupt checkpoint: step {state['step']} with "
            f"{len(state['history'])} history entries"
        )
    if not all(isinstance(e, dict) for e in state["history"]):
        raise CheckpointError(f"{path}: corrupt checkpoint: history entries are not mappings")
    for i, entry in enumerate(state["history"]):
        problem = _history_problem(i, entry)
        if problem:
            raise CheckpointError(f"{path}: corrupt checkpoint: history entry {i}: {problem}")
    leaves = []
    while f"opt_{len(leaves)}" in arrays:
        leaves.append(arrays[f"opt_{len(leaves)}"])
    return {**state, "u": arrays["u"], "leaves": leaves}


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _history_problem(i: int, entry: dict) -> str:
    """What is wrong with history entry ``i`` ("" if nothing): ``step`` is ``i``,
    ``objective`` a finite number, ``parameters`` (and ``gradient``) name -> finite
    number, ``significance`` a number or null, ``widths`` a list of numbers, ``yields``
    name -> number or null (what results.json and the plots read)."""
    if entry.get("step") != i or isinstance(entry.get("step"), bool):
        return f"'step' is {entry.get('step')!r}, expected {i}"
    if not _real(entry.get("objective")):
        return f"'objective' is {entry.get('objective')!r}, expected a finite number"
    for key, required in (("parameters", True), ("gradient", False)):
        value = entry.get(key)
        if value is None and not required:
            continue
        if not isinstance(value, dict) or not all(_real(v) for v in value.values()):
            return f"{key!r} should map names to finite numbers"
    sig = entry.get("significance")
    if sig is not None and not isinstance(sig, (int, float)):
        return f"'significance' is {sig!r}, expected a number or null"
    widths = entry.get("widths", [])
    if not isinstance(widths, list) or not all(_real(w) for w in widths):
        return "'widths' should be a list of finite numbers"
    yields = entry.get("yields", {})
    if not isinstance(yields, dict) or not all(
        v is None or isinstance(v, (int, float)) for v in yields.values()
    ):
        return "'yields' should map datasets to numbers"
    return ""


def _expect(path: Path, state: dict, key: str, kind: type) -> None:
    value = state.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CheckpointError(
            f"{path}: corrupt checkpoint: '{key}' should be {kind.__name__}, "
            f"got {type(value).__name__}"
        )


def config_change(stored: Any, now: Any) -> str | None:
    """The first config key that differs between a checkpoint's :func:`config_snapshot`
    and the run's, as ``"key: old in the checkpoint, new now"`` (None: none differs).

    Parameters
    ----------
    stored, now : Any
        Two :func:`config_snapshot` values (JSON data).

    Returns
    -------
    str or None
    """
    return _config_diff(stored, now)


def _config_diff(old: Any, new: Any, where: str = "") -> str | None:
    """The first dotted key whose value differs, as ``"key: old -> new"``."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key not in old or key not in new or old[key] != new[key]:
                sub = f"{where}.{key}" if where else str(key)
                if key in old and key in new:
                    return _config_diff(old[key], new[key], sub)
                return f"{sub}: {'absent' if key not in old else 'present'} in the checkpoint"
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            if a != b:
                return _config_diff(a, b, f"{where}.{i}")
        return None
    show = lambda v: json.dumps(v)[:40]  # noqa: E731
    return f"{where}: {show(old)} in the checkpoint, {show(new)} now"


def _rebuild(path: Path, layout: dict, leaves: list[np.ndarray], like: Any) -> Any:
    """The optimiser state from stored leaves, with the structure of ``like`` (a fresh init)."""
    if type(like) is dict:
        keys, present = layout.get("keys"), layout.get("present")
        if layout.get("kind") != "mapping" or sorted(like) != keys or not isinstance(present, list):
            raise CheckpointError(
                f"{path}: optimiser state does not match the configured method "
                f"(stored {layout.get('kind')!r} {keys}, expected keys {sorted(like)})"
            )
        if len(present) != len(leaves) or not set(present) <= set(keys):
            raise CheckpointError(f"{path}: corrupt checkpoint: optimiser state arrays missing")
        state: dict[str, Any] = dict.fromkeys(keys)
        state.update(zip(present, leaves))
        return state
    fresh, treedef = jax.tree_util.tree_flatten(like)
    if layout.get("kind") != "pytree" or len(leaves) != len(fresh):
        raise CheckpointError(
            f"{path}: optimiser state has {len(leaves)} arrays, the configured optimiser "
            f"needs {len(fresh)} (different optimiser?)"
        )
    for i, (a, b) in enumerate(zip(leaves, fresh)):
        b = np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            raise CheckpointError(
                f"{path}: optimiser state array {i} is {a.dtype}{list(a.shape)}, "
                f"expected {b.dtype}{list(b.shape)}"
            )
    return jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(x) for x in leaves])


def load_checkpoint(
    path: Path,
    fingerprint: str,
    *,
    like: Any = None,
    names: tuple[str, ...] | None = None,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Read and validate a checkpoint for a run; the result has the keys :func:`save_checkpoint` takes.

    ``like`` is the run's fresh optimiser state (its tree structure rebuilds the stored
    one; None returns the raw leaves), ``names`` the trainable parameters and ``config``
    the run's :func:`config_snapshot` (to name the key that changed).
    """
    path = Path(path)
    legacy = path.with_name(LEGACY_CHECKPOINT)
    if not path.exists() and legacy.exists():
        raise CheckpointError(
            f"{legacy}: old pickle checkpoint refused (a pickle can run code, so it is never "
            "loaded); start over with --overwrite"
        )
    data = read_checkpoint(path)
    stored_names = data.get("names")
    if names is not None and stored_names is not None and list(names) != stored_names:
        raise CheckpointError(
            f"{path}: trainable parameters differ: {', '.join(stored_names)} in the checkpoint, "
            f"{', '.join(names)} now"
        )
    if data["fingerprint"] != fingerprint:
        what = None
        if config is not None and data.get("config") is not None:
            what = _config_diff(data["config"], config)
        detail = f" ({what})" if what else ""
        raise CheckpointError(
            f"{path}: checkpoint was made with a different config{detail}; "
            "use another --output or drop --resume"
        )
    u = data["u"]
    n = len(names) if names is not None else u.shape[0] if u.ndim == 1 else -1
    if u.dtype != np.float64 or u.shape != (n,) or not np.all(np.isfinite(u)):
        raise CheckpointError(
            f"{path}: corrupt checkpoint: parameters are {u.dtype}{list(u.shape)}, "
            f"expected {n} finite float64 values"
        )
    if not np.all((u >= 0.0) & (u <= 1.0)):
        bad = int(np.argmax((u < 0.0) | (u > 1.0)))
        who = names[bad] if names is not None else f"parameter {bad}"
        raise CheckpointError(
            f"{path}: corrupt checkpoint: {who} is {float(u[bad])!r} in unit coordinates, outside "
            "[0, 1] (its bounds)"
        )
    for i, leaf in enumerate(data["leaves"]):
        if leaf.dtype.kind not in "biuf" or (
            leaf.dtype.kind == "f" and not np.all(np.isfinite(leaf))
        ):
            raise CheckpointError(
                f"{path}: corrupt checkpoint: optimiser state array {i} is not finite numbers"
            )
    opt_state = (
        data["leaves"] if like is None else _rebuild(path, data["opt_state"], data["leaves"], like)
    )
    return {
        "fingerprint": data["fingerprint"],
        "names": stored_names,
        "step": data["step"],
        "u": u,
        "opt_state": opt_state,
        "history": data["history"],
        "converged": bool(data.get("converged", False)),
        "config": data.get("config"),
    }
