"""Output safety: the output directory is checked and locked before any computation, an
earlier checkpoint is never silently deleted, command-line counts must be positive, and
Ctrl-C exits 130 with the checkpoint intact."""

from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from analysis.cli.outdir import LOCK, OutputError, check_output_dir, claim_output
from analysis.cli.parser import claim_run, main
from analysis.config.loader import config_from_dict
from analysis.errors import DiffcoffeaError
from analysis.optimize import checkpoint as C
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config

CONFIG = {"datasets": {"a": {"files": "a.root"}}}


@pytest.fixture
def config(tmp_path) -> Path:
    return write_config(tmp_path / "c.yaml", CONFIG)


@pytest.fixture
def no_computation(monkeypatch):
    """Any attempt to build an evaluator (read data, compile) fails the test."""
    import analysis.driver.runner

    def refuse(*args, **kwargs):
        raise AssertionError("computation started before the output directory was checked")

    monkeypatch.setattr(analysis.driver.runner.Evaluator, "__init__", refuse)


def _fails(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    return one_line_error(capsys.readouterr().err)


COMMANDS = [["evaluate"], ["optimize", "--no-plots"], ["scan", "--grid", "p=1:2:2"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_output_is_a_file(tmp_path, config, capsys, no_computation, command):
    (tmp_path / "out").write_text("not a directory")
    for out in (tmp_path / "out", tmp_path / "out" / "sub"):
        line = _fails([command[0], str(config), "-o", str(out), "--quiet", *command[1:]], capsys)
        assert str(out) in line and "is not a directory" in line


def test_output_name_too_long(tmp_path, config, capsys, no_computation):
    out = tmp_path / ("x" * 300)
    line = _fails(["evaluate", str(config), "-o", str(out), "--quiet"], capsys)
    assert "300 bytes, longer than" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_output_not_writable(tmp_path, config, capsys, no_computation):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        line = _fails(["evaluate", str(config), "-o", str(ro / "out"), "--quiet"], capsys)
        assert "cannot create" in line
        line = _fails(["evaluate", str(config), "-o", str(ro), "--quiet"], capsys)
        assert "not writable" in line
    finally:
        ro.chmod(0o755)


def test_output_not_writable_even_as_root(tmp_path, config, capsys, no_computation, monkeypatch):
    """The write probe's failure (read-only mount, ACL) as the one line; works under root."""

    real_open = os.open

    def refuse(path, *args, **kwargs):
        if ".diffcoffea-probe-" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    line = _fails(["evaluate", str(config), "-o", str(tmp_path / "out"), "--quiet"], capsys)
    assert "not writable: Permission denied" in line


def test_check_output_dir_creates_parents(tmp_path):
    assert check_output_dir(tmp_path / "a" / "b").is_dir()
    assert list((tmp_path / "a" / "b").iterdir()) == []  # the write probe is removed


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _write_lock(out: Path, pid: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    info = {"pid": pid, "host": socket.gethostname(), "command": "optimize", "started": "t"}
    (out / LOCK).write_text(json.dumps(info))


def test_second_run_into_a_locked_directory_fails(tmp_path, config, capsys, no_computation):
    out = tmp_path / "out"
    other = _sleeper()  # a live process holding the lock
    try:
        _write_lock(out, other.pid)
        for command in COMMANDS:
            argv = [command[0], str(config), "-o", str(out), "--quiet", *command[1:]]
            line = _fails(argv, capsys)
            assert f"in use by another run (pid {other.pid}" in line and LOCK in line
        # The other run's lock is left alone.
        assert json.loads((out / LOCK).read_text())["pid"] == other.pid
    finally:
        other.kill()
        other.wait()


def test_lock_is_exclusive_within_a_process_and_released(tmp_path):
    out = tmp_path / "out"
    with claim_output(out, command="first"):
        held = json.loads((out / LOCK).read_text())
        assert held["pid"] == os.getpid() and held["command"] == "first"
        with pytest.raises(OutputError, match="in use by another run"):
            with claim_output(out):
                pass
    assert not (out / LOCK).exists()
    with pytest.raises(RuntimeError):
        with claim_output(out):
            raise RuntimeError("a failing run releases the lock too")
    assert not (out / LOCK).exists()


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    out = tmp_path / "out"
    dead = _sleeper()
    dead.kill()
    dead.wait()  # reaped: the PID no longer exists
    _write_lock(out, dead.pid)
    with claim_output(out, command="evaluate"):
        assert json.loads((out / LOCK).read_text())["pid"] == os.getpid()
    assert not (out / LOCK).exists()


def _args(out: Path, **kw) -> argparse.Namespace:
    base = {"command": "optimize", "output": str(out), "resume": False, "overwrite": False}
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("name", [C.CHECKPOINT, C.LEGACY_CHECKPOINT])
def test_existing_checkpoint_needs_resume_or_overwrite(tmp_path, config, capsys, name):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_bytes(b"an earlier run")
    line = _fails(["optimize", str(config), "-o", str(out), "--quiet", "--no-plots"], capsys)
    assert str(out / name) in line and "--resume" in line and "--overwrite" in line
    assert (out / name).read_bytes() == b"an earlier run"
    assert not (out / LOCK).exists()  # the refused run released its lock
    cfg = config_from_dict(CONFIG)
    with claim_run(cfg, _args(out, resume=True)):  # --resume keeps it (to load it)
        assert (out / name).exists()
    with claim_run(cfg, _args(out, overwrite=True)):  # --overwrite deletes it
        assert not (out / name).exists() and (out / LOCK).exists()
    assert not (out / LOCK).exists()


@pytest.mark.parametrize("name", [C.CHECKPOINT, C.LEGACY_CHECKPOINT])
def test_evaluate_keeps_an_optimize_run(tmp_path, config, capsys, no_computation, name):
    """``evaluate`` after ``optimize`` with one output.dir once replaced the optimised
    results.json and workspace/datacard by those at the initial parameters, silently."""
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_bytes(b"an optimize run")
    (out / "results.json").write_text('{"history": []}')
    line = _fails(["evaluate", str(config), "-o", str(out), "--quiet"], capsys)
    assert f"{out}: holds an optimize run ({name})" in line and "-o" in line
    assert (out / "results.json").read_text() == '{"history": []}'
    assert not (out / LOCK).exists()


@pytest.mark.parametrize(
    "option, value",
    [
        ("--workers", "-1"),
        ("--workers", "0"),
        ("--chunksize", "0"),
        ("--steps", "-5"),
        ("--steps", "0"),
        ("--chunksize", "1e3"),
    ],
)
def test_counts_must_be_positive(config, capsys, option, value):
    command = "optimize" if option == "--steps" else "evaluate"
    with pytest.raises(SystemExit) as info:
        main([command, str(config), option, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "positive integer" in err and "Traceback" not in err


def test_unlockable_directory_is_one_line(tmp_path, config, capsys, no_computation):
    """Something in the way of the lock file (here a directory of that name)."""
    out = tmp_path / "out"
    (out / LOCK).mkdir(parents=True)
    line = _fails(["evaluate", str(config), "-o", str(out), "--quiet"], capsys)
    assert str(out / LOCK) in line and "cannot take the lock" in line


# --- Ctrl-C ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(small_data) -> Path:
    return small_data


def _start(config: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        H.cli_command("optimize", str(config), "-o", str(out), "--quiet", "--no-plots"),
        cwd=H.REPO,
        env=H.cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def signal_when(proc: subprocess.Popen, ready, what: str, signum: int) -> str:
    """Send ``signum`` to ``proc`` once ``ready()`` (a moment later: somewhere inside the
    next step); its stderr."""
    deadline = time.monotonic() + 240
    try:
        while not ready():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, f"no {what} in time"
            time.sleep(0.01)
        time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return err


@pytest.mark.parametrize("delay", [0.2, 1.0])
def test_ctrl_c_during_start_up_exits_130(data, tmp_path, delay):
    config = write_config(tmp_path / "opt.yaml", H.config_dict(data))
    proc = _start(config, tmp_path / "out")
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip() == "diffcoffea: interrupted"


@pytest.mark.slow
def test_ctrl_c_mid_run_exits_130_with_the_checkpoint_intact(data, tmp_path):
    config = write_config(tmp_path / "opt.yaml", H.config_dict(data, optimizer={"steps": 50}))
    out = tmp_path / "out"
    proc = _start(config, out)
    err = signal_when(proc, (out / C.CHECKPOINT).exists, "checkpoint", signal.SIGINT)
    assert proc.returncode == 130, err
    assert err.strip() == "diffcoffea: interrupted"
    assert not (out / LOCK).exists() and not (out / "results.json").exists()
    cfg = H.make_config(data, optimizer={"steps": 50})
    from analysis.optimize.loop import config_fingerprint
    ckpt = C.load_checkpoint(out / C.CHECKPOINT, config_fingerprint(cfg))
    assert 1 <= ckpt["step"] < 50 and len(ckpt["history"]) == ckpt["step"]


def test_diffcoffea_error_is_raised_for_bad_claims(tmp_path):
    with pytest.raises(DiffcoffeaError):
        check_output_dir(tmp_path / ("y" * 400))


def test_ctrl_c_while_the_parser_is_built_is_the_same_one_line(monkeypatch, capsys):
    from analysis.cli import parser as cli

    def interrupted():
        raise KeyboardInterrupt  # as the SIGINT handler would, in build_parser

    monkeypatch.setattr(cli, "build_parser", interrupted)
    old = signal.getsignal(signal.SIGINT)
    try:
        assert main(["evaluate", "x.yaml"]) == 130
        # in-process, the caller's Ctrl-C handling is left as it was (the command line
        # ignores a second Ctrl-C while it exits)
        assert signal.getsignal(signal.SIGINT) is old
    finally:
        signal.signal(signal.SIGINT, old)
    assert capsys.readouterr().err == "diffcoffea: interrupted\n"


def test_ctrl_c_wrapped_by_python_in_an_import_is_still_130(monkeypatch, capsys):
    """CI saw it: a Ctrl-C inside pydantic's import lands in a class body's
    ``__set_name__``, which Python re-raises as a RuntimeError (its cause the
    KeyboardInterrupt). That is still the user's Ctrl-C: one line, 130, no traceback."""
    from analysis.cli import parser as cli

    class Wrapping:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt  # as the SIGINT handler would, mid-import

    def command(name):
        def run(args):
            type("DecoratorInfos", (), {"validators": Wrapping()})
        return run

    monkeypatch.setattr(cli, "_command", command)
    old = signal.getsignal(signal.SIGINT)
    try:
        assert main(["evaluate", "x.yaml"]) == 130
    finally:
        signal.signal(signal.SIGINT, old)
    assert capsys.readouterr().err == "diffcoffea: interrupted\n"


class _FiresBeforeStartReturns:
    """A ``threading.Timer`` whose first instance fires inside ``start()``: what a
    loaded machine does when the main thread is not scheduled again within the delay."""

    made = 0
    timer = threading.Timer  # the real one (the test replaces the module's)

    def __new__(cls, interval, function, args=()):
        cls.made += 1
        timer = cls.timer(interval, function, args)
        if cls.made > 1:
            return timer
        timer.start = lambda: function(*args)  # the SIGINT arrives here, in the hook
        return timer


# The swallowed interrupts are the point (the re-sent one too may land in a gc
# callback, JAX's, when a collection of a large heap outlasts the delay): not warnings.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("timer", ["as is", "fires before start returns"])
def test_ctrl_c_swallowed_by_a_gc_callback_is_delivered_again(monkeypatch, timer):
    """A KeyboardInterrupt raised inside a gc callback (JAX registers one) is ignored by
    Python; the command line's unraisable hook sends SIGINT again, so the run stops.
    Also when that SIGINT lands while the hook still runs (swallowed once more)."""
    import gc

    from analysis.cli import parser as cli

    if timer != "as is":
        monkeypatch.setattr(_FiresBeforeStartReturns, "made", 0)
        monkeypatch.setattr(threading, "Timer", _FiresBeforeStartReturns)

    def callback(phase, info):
        if phase == "start":
            gc.callbacks.remove(callback)
            raise KeyboardInterrupt  # as the SIGINT handler would, inside the callback

    monkeypatch.setattr(sys, "unraisablehook", cli._on_unraisable)
    try:
        with _cli_sigint():
            # the heap collected first: the collection below then ends within the re-sent
            # SIGINT's delay instead of taking it into another gc callback
            gc.collect()
            gc.callbacks.append(callback)
            with pytest.raises(KeyboardInterrupt):
                gc.collect()  # swallowed here ("Exception ignored in ...")
                _wait_for_the_interrupt()
    finally:
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)


@contextlib.contextmanager
def _cli_sigint():
    """The command line's SIGINT handler, installed for the block, then the old one back."""
    import logging

    from analysis.cli import parser as cli

    level = logging.getLogger("distributed").level
    old = signal.signal(signal.SIGINT, cli._on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        logging.getLogger("distributed").setLevel(level)


def _wait_for_the_interrupt(seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


def test_other_unraisable_exceptions_go_to_the_default_hook(monkeypatch):
    from types import SimpleNamespace

    from analysis.cli import parser as cli

    seen = []
    monkeypatch.setattr(cli, "_default_unraisablehook", seen.append)
    info = SimpleNamespace(exc_type=ValueError, exc_value=ValueError("x"))
    cli._on_unraisable(info)
    assert seen == [info]


class _NativeInit(importlib.machinery.ExtensionFileLoader):
    """A C extension's loader whose initialisation calls back into Python, as jaxlib's
    nanobind modules do (they build enums) while JAX is imported."""

    def exec_module(self, module):
        module.init()


def test_a_ctrl_c_inside_a_native_modules_initialisation_arrives_after_it():
    """Raised there, the KeyboardInterrupt would cross C++ frames and abort the process
    ("terminate called after throwing an instance of 'nanobind::python_error'": seen
    about once in ten Ctrl-Cs one second into ``diffcoffea optimize`` on a loaded
    machine); it is delivered again once the initialisation has returned."""
    from types import SimpleNamespace


    seen = []

    def init():
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs in this frame
        time.sleep(0.05)
        seen.append("initialised")

    with _cli_sigint(), pytest.raises(KeyboardInterrupt):
        _NativeInit("native", "native.so").exec_module(SimpleNamespace(init=init))
        seen.append("imported")
        _wait_for_the_interrupt()
    assert seen == ["initialised", "imported"]
