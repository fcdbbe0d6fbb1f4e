"""The output lock under hostile conditions (issue 37, class 2): a symlink planted at
``.diffcoffea.lock`` is never written through, a lock with nonsense content (a PID of
2**70, not JSON, JSON nested 3,000 deep) or a FIFO there is one line, and SIGTERM is
handled as Ctrl-C: one line, exit 143, the lock released, the checkpoint kept."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from analysis.cli.outdir import LOCK, OutputError, claim_output
from analysis.cli.parser import main
from analysis.optimize import checkpoint as C
from tests import opt_helpers as H
from tests.cli.test_hostile_output import _start, signal_when
from tests.conftest import one_line_error, write_config


def _fails(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    return one_line_error(capsys.readouterr().err)


@pytest.fixture
def config(tmp_path) -> Path:
    return write_config(tmp_path / "c.yaml", {"datasets": {"a": {"files": "a.root"}}})


def test_symlinked_lock_is_not_written_through(tmp_path, config, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).symlink_to(victim)
    with pytest.raises(OutputError, match=r"lock file is a symlink \(to .*victim.txt\); not "
                                           r"followed: delete it"):
        with claim_output(out):
            pass
    line = _fails(["evaluate", str(config), "-o", str(out), "--quiet"], capsys)
    assert "lock file is a symlink" in line
    assert victim.read_text() == "" and (out / LOCK).is_symlink()
    dangling = tmp_path / "out2"
    dangling.mkdir()
    (dangling / LOCK).symlink_to(tmp_path / "created-elsewhere")
    with pytest.raises(OutputError, match="symlink"), claim_output(dangling):
        pass
    assert not (tmp_path / "created-elsewhere").exists()


@pytest.mark.parametrize("content", [json.dumps({"pid": 2**70, "host": "h"}), "not json {",
                                     "[" * 3000 + "]" * 3000, json.dumps({"pid": True}),
                                     json.dumps({"pid": -5})],
                         ids=["pid 2**70", "not JSON", "nested", "pid true", "pid -5"])
def test_lock_with_nonsense_content_is_one_line(tmp_path, config, capsys, content):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text(content)
    line = _fails(["evaluate", str(config), "-o", str(out), "--quiet"], capsys)
    assert line.endswith(f"{LOCK}: unreadable lock file (not the JSON of a run with a valid "
                         f"pid); delete it if no run uses {out}")


def test_lock_that_is_a_fifo_is_one_line_at_once(tmp_path, config, capsys):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / LOCK)
    start = time.monotonic()
    line = _fails(["evaluate", str(config), "-o", str(out), "--quiet"], capsys)
    assert "the lock file is not a regular file" in line and time.monotonic() - start < 10


def test_sigterm_releases_the_lock(small_data, tmp_path):
    data = small_data
    config = write_config(tmp_path / "opt.yaml", H.config_dict(data))
    out = tmp_path / "out"
    proc = _start(config, out)
    err = signal_when(proc, (out / LOCK).exists, "lock", signal.SIGTERM)
    assert proc.returncode == 143, err
    assert err.strip() == "diffcoffea: terminated"
    assert not (out / LOCK).exists()


@pytest.mark.slow
def test_sigterm_mid_run_keeps_the_checkpoint(small_data, tmp_path):
    data = small_data
    config = write_config(tmp_path / "opt.yaml", H.config_dict(data, optimizer={"steps": 50}))
    out = tmp_path / "out"
    proc = _start(config, out)
    err = signal_when(proc, (out / C.CHECKPOINT).exists, "checkpoint", signal.SIGTERM)
    assert proc.returncode == 143, err
    assert err.strip() == "diffcoffea: terminated"
    assert not (out / LOCK).exists() and not (out / "results.json").exists()
    from analysis.optimize.loop import config_fingerprint

    cfg = H.make_config(data, optimizer={"steps": 50})
    ckpt = C.load_checkpoint(out / C.CHECKPOINT, config_fingerprint(cfg))
    assert 1 <= ckpt["step"] < 50


def test_planted_probe_symlink_is_not_written_through(tmp_path):
    """The writability probe's name is predictable (its PID): a symlink planted there
    must not truncate its target."""
    from analysis.cli.outdir import check_output_dir

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / f".diffcoffea-probe-{os.getpid()}").symlink_to(victim)
    check_output_dir(out)
    assert victim.read_text() == "keep me"
