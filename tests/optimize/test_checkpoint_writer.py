"""Checkpoints written on a thread of their own (``optimize`` from the command line):
the file is what :func:`~analysis.optimize.checkpoint.save_checkpoint` writes, of the
data as it was when submitted; a failed write (a full disk) is the same one line, raised
by the next submit or wait, with the last good checkpoint kept and no temporary file
left; the command line's run ends with its last step's checkpoint written."""

from __future__ import annotations

import errno
import json
import threading

import numpy as np
import pytest

from analysis.cli.parser import main
from analysis.data import atomic
from analysis.data.atomic import WriteError
from analysis.optimize import checkpoint as C
from analysis.optimize.checkpoint import (
    CHECKPOINT,
    CheckpointWriter,
    checkpoint_bytes,
    read_checkpoint,
    save_checkpoint,
)
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config
from tests.data.test_atomic_writes import _full_open


def _data(u: np.ndarray, step: int = 1) -> dict:
    return {"fingerprint": "f", "step": step, "u": u, "opt_state": {"count": np.zeros(())},
            "history": [{"step": k, "objective": -1.0 - k, "parameters": {"a": 1.0}}
                        for k in range(step)], "converged": False}


def _same(a: dict, b: dict) -> bool:
    return (a["step"] == b["step"] and a["history"] == b["history"]
            and np.array_equal(a["u"], b["u"]) and a["fingerprint"] == b["fingerprint"])


def test_a_background_write_is_the_same_checkpoint_of_the_data_when_submitted(
        tmp_path, monkeypatch):
    data = _data(np.array([0.25, 0.5]), step=3)
    save_checkpoint(tmp_path / "direct.npz", data)
    real, changed = C.checkpoint_bytes, threading.Event()

    def late(snapshot):  # the thread serialises only once the caller has moved on
        changed.wait(30)
        return real(snapshot)

    monkeypatch.setattr(C, "checkpoint_bytes", late)
    writer = CheckpointWriter()
    writer.submit(tmp_path / CHECKPOINT, data)
    data["history"].append({"step": 3, "objective": 0.0, "parameters": {"a": 2.0}})  # later
    data["u"][0] = 1.0
    changed.set()
    writer.wait()
    direct, written = read_checkpoint(tmp_path / "direct.npz"), read_checkpoint(tmp_path / CHECKPOINT)
    assert _same(written, direct) and len(written["history"]) == 3
    assert written["u"].tolist() == [0.25, 0.5]
    # the same members and arrays as the direct write (only the zip's timestamps may differ)
    assert len(checkpoint_bytes(_data(np.array([0.25, 0.5]), step=3))) == \
        (tmp_path / "direct.npz").stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT, "direct.npz"]


def test_writes_follow_each_other_and_the_last_is_on_disk(tmp_path):
    writer = CheckpointWriter()
    for step in range(1, 6):
        writer.submit(tmp_path / CHECKPOINT, _data(np.array([step / 10]), step=step))
    writer.wait()
    assert read_checkpoint(tmp_path / CHECKPOINT)["step"] == 5
    writer.wait()  # nothing pending: nothing to do


def test_a_failed_write_is_raised_by_the_next_wait_or_submit(tmp_path, monkeypatch):
    path = tmp_path / CHECKPOINT
    save_checkpoint(path, _data(np.array([0.5])))
    good = read_checkpoint(path)
    monkeypatch.setattr(atomic, "_open", _full_open(errno.ENOSPC))
    writer = CheckpointWriter()
    writer.submit(path, _data(np.linspace(0, 1, 1000), step=2))  # fails on its thread
    with pytest.raises(WriteError) as info:
        writer.wait()
    assert str(info.value) == f"{path}: cannot write checkpoint: No space left on device (ENOSPC)"
    writer.submit(path, _data(np.linspace(0, 1, 1000), step=3))
    with pytest.raises(WriteError):
        writer.submit(path, _data(np.linspace(0, 1, 1000), step=4))  # the previous one's error
    writer.submit(path, _data(np.linspace(0, 1, 1000), step=5))
    writer.wait(raise_error=False)  # a failing run drops it: its own error is reported
    writer.wait()
    assert _same(read_checkpoint(path), good)
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT]  # no temporary file left


def test_the_command_line_run_ends_with_its_last_checkpoint(small_data, tmp_path):
    config = write_config(tmp_path / "opt.yaml", H.config_dict(small_data, optimizer={"steps": 3}))
    out = tmp_path / "out"
    assert main(["optimize", str(config), "-o", str(out), "--quiet", "--no-plots"]) == 0
    report = json.loads((out / "results.json").read_text())
    ckpt = read_checkpoint(out / CHECKPOINT)
    assert ckpt["step"] == report["steps_run"] == 3
    assert H.comparable_history(ckpt["history"]) == H.comparable_history(report["history"])
    assert not list(out.glob("*.tmp"))


@pytest.mark.parametrize("full_at", [3, 4])  # mid-run; the last step's (waited for after the loop)
def test_a_full_disk_mid_run_is_one_line_and_keeps_the_last_good_checkpoint(
        small_data, tmp_path, monkeypatch, capsys, full_at):
    config = write_config(tmp_path / "opt.yaml", H.config_dict(small_data, optimizer={"steps": 4}))
    out = tmp_path / "out"
    real = atomic._open
    written: list[str] = []

    def opener(path, mode, **kwargs):  # checkpoint number full_at finds the disk full
        if ".npz" in str(path):
            written.append(str(path))
            if len(written) >= full_at:
                return _full_open(errno.ENOSPC)(path, mode, **kwargs)
        return real(path, mode, **kwargs)

    monkeypatch.setattr(atomic, "_open", opener)
    capsys.readouterr()
    assert main(["optimize", str(config), "-o", str(out), "--quiet", "--no-plots"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line == (f"diffcoffea: error: {out / CHECKPOINT}: cannot write checkpoint: "
                    "No space left on device (ENOSPC)")
    assert read_checkpoint(out / CHECKPOINT)["step"] == full_at - 1
    assert not (out / "results.json").exists() and not list(out.glob("*.tmp"))
