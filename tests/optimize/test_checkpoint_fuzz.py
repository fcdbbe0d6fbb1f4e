"""Checkpoint contents are validated (issue 21.6), and fuzzed.

A crafted checkpoint with unit parameters outside [0, 1], a non-finite optimiser state or
a garbage history is refused with one line (it used to resume outside the bounds, or
reach results.json and make the plots raise ``KeyError``); a FIFO named
``checkpoint.npz`` is refused at once instead of blocking ``--resume``. Random bit
flips, truncations and crafted arrays give either a checkpoint that passes every check
or one :class:`CheckpointError` line, never another exception.
"""

from __future__ import annotations

import io
import os
import threading
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from analysis.optimize import checkpoint as C

NAMES = ("a", "b")


def _good(path: Path, **over) -> Path:
    u = np.array([0.25, 0.75])
    data = {
        "fingerprint": "f",
        "names": NAMES,
        "config": {"optimizer": {"steps": 4}},
        "step": 2,
        "u": u,
        "opt_state": optax.adam(0.05).init(jnp.asarray(u)),
        "history": [{"step": k, "objective": -1.0 - k, "significance": None,
                     "parameters": {"a": 1.0, "b": 2.0}, "widths": [5.0]} for k in range(2)],
        "converged": False,
    }
    data.update(over)
    C.save_checkpoint(path, data)
    return path


def _load(path: Path) -> dict:
    like = optax.adam(0.05).init(jnp.zeros(2))
    return C.load_checkpoint(path, "f", like=like, names=NAMES)


@pytest.mark.parametrize("what,over,message", [
    ("u above 1", {"u": np.array([0.25, 1.5])}, "b is 1.5 in unit coordinates, outside [0, 1]"),
    ("u below 0", {"u": np.array([-0.1, 0.5])}, "a is -0.1 in unit coordinates"),
    ("inf in the optimiser state",
     {"opt_state": jax.tree_util.tree_map(
         lambda x: jnp.full_like(x, jnp.inf) if x.dtype == jnp.float64 else x,
         optax.adam(0.05).init(jnp.asarray([0.5, 0.5])))},
     "optimiser state array 1 is not finite numbers"),
    ("objective a string", {"history": [{"step": 0, "objective": "x", "parameters": {}},
                                        {"step": 1, "objective": 1.0, "parameters": {}}]},
     "history entry 0: 'objective' is 'x', expected a finite number"),
    ("no parameters", {"history": [{"step": 0, "objective": 1.0}, {"step": 1, "objective": 1.0}]},
     "history entry 0: 'parameters' should map names to finite numbers"),
    ("steps out of order", {"history": [{"step": 1, "objective": 1.0, "parameters": {}},
                                        {"step": 1, "objective": 1.0, "parameters": {}}]},
     "history entry 0: 'step' is 1, expected 0"),
])
def test_crafted_contents_are_one_line(what, over, message, tmp_path) -> None:
    path = _good(tmp_path / C.CHECKPOINT, **over)
    with pytest.raises(C.CheckpointError) as info:
        _load(path)
    text = str(info.value)
    assert "\n" not in text and message in text, text


def test_a_fifo_is_refused_at_once(tmp_path) -> None:
    path = tmp_path / C.CHECKPOINT
    os.mkfifo(path)
    caught: list[BaseException] = []
    t = threading.Thread(target=lambda: _catch(caught, path), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # unblock the reader, then fail
        with open(path, "wb"):
            pass
        pytest.fail("reading a FIFO checkpoint blocked")
    assert isinstance(caught[0], C.CheckpointError)
    assert str(caught[0]) == f"{path}: not a regular file; a checkpoint is a file"


def _catch(out: list, path: Path) -> None:
    try:
        _load(path)
    except BaseException as err:
        out.append(err)


def _valid(data: dict) -> None:
    u = np.asarray(data["u"])
    assert u.shape == (2,) and np.all((u >= 0) & (u <= 1))
    assert all(isinstance(h["parameters"], dict) for h in data["history"])


def test_bit_flips_and_truncations(tmp_path) -> None:
    good = _good(tmp_path / "good.npz").read_bytes()
    rng = np.random.default_rng(21)
    target = tmp_path / C.CHECKPOINT
    outcomes = {"ok": 0, "refused": 0}
    for trial in range(300):
        raw = bytearray(good)
        if trial % 3 == 0:
            raw = raw[: int(rng.integers(0, len(raw)))]
        else:
            for _ in range(int(rng.integers(1, 4))):
                raw[int(rng.integers(0, len(raw)))] ^= 1 << int(rng.integers(0, 8))
        target.write_bytes(bytes(raw))
        try:
            _valid(_load(target))
            outcomes["ok"] += 1
        except C.CheckpointError as err:
            assert "\n" not in str(err)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100, outcomes


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, allow_pickle=False)
    return buf.getvalue()


@pytest.mark.parametrize("member,array", [
    ("u.npy", np.array([0.5, np.nan])),
    ("u.npy", np.array([0.5, 2.0])),
    ("u.npy", np.array([[0.5, 0.5]])),
    ("u.npy", np.array(["a", "b"])),
    ("u.npy", np.array([1, 0], dtype=np.int64)),
    ("opt_1.npy", np.array([np.inf, 0.0])),
    ("opt_1.npy", np.zeros(7)),
    ("opt_0.npy", np.array([1.5])),
    ("state.npy", np.frombuffer(b'{"format": 1}', dtype=np.uint8)),
    ("state.npy", np.zeros(4, dtype=np.float64)),
])
def test_crafted_arrays_are_refused(member, array, tmp_path) -> None:
    path = _good(tmp_path / C.CHECKPOINT)
    members = _members(path)
    members[member] = _npy(array)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    with pytest.raises(C.CheckpointError):
        _load(path)
