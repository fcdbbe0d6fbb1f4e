"""Every write is atomic and fault-reported (issue 21.3).

results.json, checkpoints, plots and spilled cache columns go through
:func:`analysis.data.atomic.atomic_open`. A full disk (ENOSPC), a permission (EACCES) or
a read-only file system (EROFS) is one :class:`WriteError` line naming the path; no
partial or temporary file is left, and the previous file (the last good checkpoint)
survives. Tested with a file that fills up after a few bytes (any machine) and on a
real 64 KB tmpfs (in a user and mount namespace, where ``unshare`` allows it).
"""

from __future__ import annotations

import errno
import io
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from analysis.data import atomic
from analysis.data.atomic import WriteError, atomic_open, write_atomic
from tests.conftest import REPO


class _Full(io.FileIO):
    """A file on a disk that takes ``room`` bytes, then fails with ``code``."""

    room = 100
    code = errno.ENOSPC

    def write(self, b):  # type: ignore[override]
        if self.tell() + len(b) > self.room:
            raise OSError(self.code, __import__("os").strerror(self.code))
        return super().write(b)


def _full_open(code: int, room: int = 100):
    def opener(path, mode, **kwargs):
        cls = type("F", (_Full,), {"room": room, "code": code})
        raw = cls(path, "w")
        return io.TextIOWrapper(io.BufferedWriter(raw), **kwargs) if "b" not in mode else \
            io.BufferedWriter(raw, buffer_size=16)

    return opener


def _checkpoint(u: np.ndarray) -> dict:
    return {"fingerprint": "f", "step": 1, "u": u, "opt_state": {"count": np.zeros(())},
            "history": [{"step": 0, "objective": -1.0, "parameters": {"a": 1.0}}], "converged": False}


@pytest.mark.parametrize("code,name", [(errno.ENOSPC, "No space left on device (ENOSPC)"),
                                       (errno.EACCES, "Permission denied (EACCES)"),
                                       (errno.EROFS, "Read-only file system (EROFS)")])
def test_a_failing_write_is_one_line_and_leaves_the_old_file(tmp_path, monkeypatch, code, name):
    from analysis.cli.commands import write_json
    from analysis.optimize.checkpoint import read_checkpoint, save_checkpoint

    ckpt, results = tmp_path / "checkpoint.npz", tmp_path / "results.json"
    save_checkpoint(ckpt, _checkpoint(np.array([0.5])))
    write_json(results, {"ok": 1})
    good = ckpt.read_bytes()
    monkeypatch.setattr(atomic, "_open", _full_open(code))
    with pytest.raises(WriteError) as info:
        save_checkpoint(ckpt, _checkpoint(np.linspace(0, 1, 1000)))
    assert str(info.value) == f"{ckpt}: cannot write checkpoint: {name}"
    with pytest.raises(WriteError, match=rf"^{results}: cannot write results: "):
        write_json(results, {"big": list(range(1000))})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz", "results.json"]
    assert ckpt.read_bytes() == good and read_checkpoint(ckpt)["u"].tolist() == [0.5]
    assert json.loads(results.read_text()) == {"ok": 1}


def test_plots_and_cache_spills_are_atomic(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.cli.plots import _save
    from analysis.data.cache import ColumnCache
    from analysis.pipeline.layout import ChunkColumns

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    monkeypatch.setattr(atomic, "_open", _full_open(errno.ENOSPC, room=2000))
    with pytest.raises(WriteError, match=r"objective.png: cannot write plot: No space left"):
        _save(fig, tmp_path / "objective.png")
    plt.close(fig)
    cache = ColumnCache(budget=0, spill_dir=str(tmp_path / "spill"))
    cols = ChunkColumns(n_events=1000, weight=np.ones(1000), counts=None, objects={}, events={})
    with pytest.raises(WriteError, match=r"\.npz: cannot write cache spill file: No space left"):
        cache.put(("k",), cols)
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.glob("*.png"))
    cache.close()


def test_an_exception_inside_leaves_nothing(tmp_path):
    target = tmp_path / "x.bin"
    write_atomic(target, b"old")
    with pytest.raises(KeyboardInterrupt), atomic_open(target) as f:
        f.write(b"new, half")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["x.bin"]


_TMPFS_SCRIPT = textwrap.dedent(
    """
    import os, subprocess, sys
    d = sys.argv[1]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", d], check=True)
    import numpy as np
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from analysis.data.atomic import WriteError
    from analysis.optimize.checkpoint import read_checkpoint, save_checkpoint
    from analysis.cli.plots import _save
    ck = os.path.join(d, "checkpoint.npz")
    base = {"fingerprint": "f", "step": 1, "opt_state": {"n": np.zeros(())},
            "history": [{"step": 0, "objective": -1.0, "parameters": {"a": 1.0}}], "converged": False}
    save_checkpoint(ck, {**base, "u": np.array([0.5])})
    try:
        save_checkpoint(ck, {**base, "u": np.random.default_rng(0).random(20000)})
    except WriteError as e:
        print("checkpoint:", e)
    print("kept:", read_checkpoint(ck)["u"].tolist(), sorted(os.listdir(d)))
    fig, ax = plt.subplots(figsize=(30, 30))
    ax.imshow(np.random.default_rng(1).random((500, 500)))
    try:
        _save(fig, os.path.join(d, "hist_x.png"))
    except WriteError as e:
        print("plot:", e)
    print("left:", sorted(os.listdir(d)))
    """
)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare")
def test_a_real_full_tmpfs(tmp_path):
    mnt = tmp_path / "full"
    mnt.mkdir()
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("user namespaces not allowed here")
    out = subprocess.run(
        ["unshare", "-rm", sys.executable, "-c", _TMPFS_SCRIPT, str(mnt)],
        capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"checkpoint: {mnt}/checkpoint.npz: cannot write checkpoint: No space " \
                       "left on device (ENOSPC)", lines
    assert lines[1] == "kept: [0.5] ['checkpoint.npz']"
    assert lines[2] == f"plot: {mnt}/hist_x.png: cannot write plot: No space left on device (ENOSPC)"
    assert lines[3] == "left: ['checkpoint.npz']"
    assert Path(REPO).is_dir()
