"""Checkpoints: a run killed between steps resumes to the same result; a failing run keeps
its last checkpoint and exits 2 with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from analysis.cli.parser import main
from analysis.optimize.checkpoint import CHECKPOINT, read_checkpoint
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config
from tests.userlosses import FAIL_BELOW

STEPS = 6
KILL_AFTER = 2  # steps completed when the run is killed


def _optimize(config: Path, outdir: Path, *extra: str) -> list[str]:
    return ["optimize", str(config), "-o", str(outdir), "--quiet", "--no-plots", *extra]


def _checkpoint(outdir: Path) -> dict | None:
    if not (outdir / CHECKPOINT).exists():
        return None
    return read_checkpoint(outdir / CHECKPOINT)


def _kill_after(config: Path, outdir: Path, steps_done: int, timeout: float = 240) -> dict:
    """Start ``optimize`` in a subprocess, SIGKILL it once ``steps_done`` steps are checkpointed."""
    proc = subprocess.Popen(
        H.cli_command(*_optimize(config, outdir)),
        cwd=H.REPO,
        env=H.cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            # The checkpoint is replaced atomically, so any file we can open is complete.
            ckpt = _checkpoint(outdir)
            if ckpt is not None and ckpt["step"] >= steps_done:
                os.kill(proc.pid, signal.SIGKILL)
                break
            if proc.poll() is not None:
                pytest.fail(f"the run ended before it could be killed:\n{proc.stderr.read()}")
            if time.monotonic() > deadline:
                pytest.fail("no checkpoint in time")
            time.sleep(0.005)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    ckpt = _checkpoint(outdir)
    assert ckpt is not None
    return ckpt


def test_killed_run_resumes_to_the_uninterrupted_result(small_data, tmp_path):
    config = write_config(
        tmp_path / "opt.yaml", H.config_dict(small_data, optimizer={"steps": STEPS})
    )

    assert main(_optimize(config, tmp_path / "whole")) == 0
    whole = json.loads((tmp_path / "whole" / "results.json").read_text())
    assert whole["steps_run"] == STEPS

    killed = tmp_path / "killed"
    ckpt = _kill_after(config, killed, KILL_AFTER)
    # Killed between steps: some work done, some left, nothing reported yet.
    assert KILL_AFTER <= ckpt["step"] < STEPS
    assert len(ckpt["history"]) == ckpt["step"]
    assert not (killed / "results.json").exists()

    assert main(_optimize(config, killed, "--resume")) == 0
    resumed = json.loads((killed / "results.json").read_text())
    assert resumed["steps_run"] == STEPS
    for name, value in whole["parameters"].items():
        assert resumed["parameters"][name] == pytest.approx(value, rel=1e-12, abs=1e-12)
    assert H.comparable_history(resumed["history"]) == H.comparable_history(whole["history"])
    assert resumed["final"] == whole["final"]


def test_resume_after_the_last_step_only_reports(small_data, tmp_path):
    """Resuming a finished run runs no more steps and reports the same result."""
    config = write_config(tmp_path / "opt.yaml", H.config_dict(small_data, optimizer={"steps": 2}))
    out = tmp_path / "out"
    assert main(_optimize(config, out)) == 0
    first = json.loads((out / "results.json").read_text())
    assert main(_optimize(config, out, "--resume")) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["steps_run"] == 2
    assert H.comparable_history(again["history"]) == H.comparable_history(first["history"])
    assert again["parameters"] == first["parameters"]


def _fails_cleanly(argv: list[str], capsys, outdir: Path) -> tuple[str, dict]:
    """Run the CLI in process: exit 2, one error line, checkpoint kept, no results."""
    capsys.readouterr()
    assert main(argv) == 2
    line = one_line_error(capsys.readouterr().err)
    ckpt = _checkpoint(outdir)
    assert ckpt is not None, "the last checkpoint was not kept"
    assert not (outdir / "results.json").exists()
    return line, ckpt


def test_python_objective_raising_mid_run_keeps_the_checkpoint(
    small_data, tmp_path, capsys, monkeypatch
):
    terms = [{"type": "python", "function": "tests.userlosses:fails_when_tight"}]
    cfg = H.config_dict(small_data, objective={"terms": terms}, optimizer={"steps": 5})
    config = write_config(tmp_path / "opt.yaml", cfg)

    # Without the limit the loss only tightens the cuts: find where the yield falls at step 3.
    monkeypatch.delenv(FAIL_BELOW, raising=False)
    assert main(_optimize(config, tmp_path / "probe")) == 0
    history = json.loads((tmp_path / "probe" / "results.json").read_text())["history"]
    y = [entry["yields"]["ttbar"] for entry in history]
    assert y[0] > y[1] > y[2] > y[3]

    monkeypatch.setenv(FAIL_BELOW, str((y[2] + y[3]) / 2))
    out = tmp_path / "out"
    line, ckpt = _fails_cleanly(_optimize(config, out), capsys, out)
    assert "tests.userlosses:fails_when_tight" in line and "ValueError" in line
    assert "fell below" in line
    assert ckpt["step"] == 3
    assert H.comparable_history(ckpt["history"]) == H.comparable_history(history[:3])


def test_vanishing_background_mid_run_keeps_the_checkpoint(small_data, tmp_path, capsys):
    """Hard object cuts and a loss that raises min_jets: the background runs out after a few steps."""
    cfg = H.config_dict(
        small_data,
        objective={
            "terms": [
                {"type": "significance", "weight": 1e-6},
                {"type": "python", "function": "tests.userlosses:signal_yield"},
            ]
        },
        optimizer={"steps": 20, "anneal": {"schedule": "none"}},
    )
    for cut in cfg["selection"]["objects"]["cuts"]:
        cut["width"] = 0.0
    config = write_config(tmp_path / "opt.yaml", cfg)
    out = tmp_path / "out"
    # the loop stops there (analysis/optimize/undefined.py): exit 0, the steps before it
    # reported, the checkpoint after the last good step kept
    assert main(_optimize(config, out)) == 0
    report = json.loads((out / "results.json").read_text())
    stopped = report["status"]["stopped"]
    assert stopped.startswith("objective undefined at step ")
    assert "background yield is 0" in stopped and "dy" in stopped
    ckpt = _checkpoint(out)
    assert ckpt is not None and 1 <= ckpt["step"] < 20
    assert all(entry["yields"]["dy"] > 0 for entry in ckpt["history"])
    # resumed from there, it stops at the same step again
    capsys.readouterr()
    assert main(_optimize(config, out, "--resume")) == 0
    again = json.loads((out / "results.json").read_text())["status"]["stopped"]
    assert again == stopped
