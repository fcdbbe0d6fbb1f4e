"""The command line's start-up without the garbage collector (analysis.cli.parser):
from the real command line the collector is off while the command imports and sets
up, then on again over a frozen heap; called in-process with arguments (a
notebook, these tests) ``main`` leaves the collector alone."""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
from pathlib import Path

from analysis.cli.parser import main
from analysis.cli.startup import start_up_done

ROOT = Path(__file__).resolve().parents[2]


def test_start_up_done_turns_the_collector_on_once() -> None:
    args = argparse.Namespace(gc_paused=True)
    frozen = gc.get_freeze_count()
    gc.disable()
    try:
        start_up_done(args)
        assert gc.isenabled() and not args.gc_paused
        assert gc.get_freeze_count() > frozen
        gc.disable()
        start_up_done(args)  # a second call: nothing
        assert not gc.isenabled()
        start_up_done(argparse.Namespace())  # not paused by main: nothing
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_main_with_arguments_leaves_the_collector_alone(capsys) -> None:
    frozen = gc.get_freeze_count()
    assert main(["optimize", "/nonexistent.yaml"]) == 2  # refused: one line
    capsys.readouterr()
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_the_command_line_pauses_the_collector_while_it_imports(small_data, tmp_path) -> None:
    """From the command line: off while the command imports and sets up, on for the
    steps, on at exit (a hook in a fresh process records it)."""
    from tests import opt_helpers as H
    from tests.conftest import write_config

    path = write_config(tmp_path / "opt.yaml", H.config_dict(small_data, optimizer={"steps": 3}))
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import gc, sys\n"
        "import analysis.optimize.loop as L\n"
        "seen = []\n"
        "orig, init = L.Optimization.do_step, L.Optimization.__init__\n"
        "def do_step(self):\n"
        "    seen.append(gc.isenabled())\n"
        "    return orig(self)\n"
        "def start(self, *a, **k):\n"
        "    seen.append(gc.isenabled())\n"
        "    init(self, *a, **k)\n"
        "L.Optimization.do_step, L.Optimization.__init__ = do_step, start\n"
        "from analysis.cli.parser import main\n"
        "code = main()\n"
        "print('steps', seen, 'after', gc.isenabled(), 'frozen', gc.get_freeze_count() > 0)\n"
        "sys.exit(code)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(probe), "optimize", str(path), "-o",
                          str(tmp_path / "out"), "--quiet", "--no-plots"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    # [set-up, step 0, 1, 2]
    assert out.stdout.strip() == "steps [False, True, True, True] after True frozen True"
