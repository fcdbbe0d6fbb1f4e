"""A run that compiles numba kernels says so once, before it compiles
(:class:`analysis.cli.compilenote.CompileNotice`): the first cache miss of the call is one
``diffcoffea: compiling the numba kernels ...`` line on stderr; a run that loads every
kernel from the cache, and ``--quiet``, print none.

The cheap tests run :func:`analysis.cli.parser.main` with a command of their own that
calls two tiny cached kernels (a new module each time: both miss); the slow one runs
the command line twice in new processes on ``configs/dimuon.yaml`` (cold ~25-30 s)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numba
import pytest

from analysis.cli import parser

REPO = Path(__file__).resolve().parents[2]
LINE = "diffcoffea: compiling the numba kernels for this plan"

KERNELS = textwrap.dedent('''
    import numba
    from analysis._compat.numba import guard_cache


    def twice(x):
        return 2.0 * x


    def plus_one(x):
        return x + 1.0


    def square(x):
        return x * x


    def run(args, fns=(twice, plus_one)):
        """Fresh dispatchers of the same functions: a warm cache loads them."""
        for fn in fns:
            kernel = numba.njit(cache=True)(fn)
            guard_cache(kernel._cache)
            assert kernel(1.5) == fn(1.5)
        return 0
''')


@pytest.fixture
def command(tmp_path, monkeypatch):
    """``evaluate`` runs the two kernels of a new module (a new source file: a new
    cache, beside it or under ``NUMBA_CACHE_DIR``); returns where the line says the
    cache is."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def fresh() -> str:
        name = f"noticekernels_{uuid.uuid4().hex}"
        (tmp_path / f"{name}.py").write_text(KERNELS)
        monkeypatch.setitem(parser.COMMANDS, "evaluate", (name, "run"))
        return str(numba.config.CACHE_DIR or tmp_path / "__pycache__")

    return fresh


def test_a_cold_call_says_it_once_and_a_warm_one_not(command, capsys):
    where = command()
    assert parser.main(["evaluate", "x.yaml"]) == 0
    first = capsys.readouterr()
    assert first.err.count(LINE) == 1, first.err  # two kernels missed: one line
    assert where in first.err  # where later runs load them from
    assert first.out == ""
    assert parser.main(["evaluate", "x.yaml"]) == 0  # both loaded from the cache
    assert LINE not in capsys.readouterr().err


def test_each_call_says_its_own_and_quiet_says_none(command, capsys):
    command()
    assert parser.main(["evaluate", "x.yaml", "--quiet"]) == 0
    assert LINE not in capsys.readouterr().err
    command()
    assert parser.main(["evaluate", "x.yaml"]) == 0  # the flag is the call's, not the module's
    assert capsys.readouterr().err.count(LINE) == 1
    command()
    assert parser.main(["evaluate", "x.yaml"]) == 0
    assert capsys.readouterr().err.count(LINE) == 1


FORKED = textwrap.dedent('''
    import multiprocessing, sys
    import noticekernels
    from analysis.cli.compilenote import CompileNotice

    notice = CompileNotice().attach()
    worker = multiprocessing.get_context("fork").Process(target=noticekernels.run, args=(None,))
    worker.start()
    worker.join()
    print("worker done", file=sys.stderr, flush=True)
    assert worker.exitcode == 0
    noticekernels.run(None, (noticekernels.twice, noticekernels.square))  # loaded; compiled
    print("main done", notice.said, file=sys.stderr, flush=True)
''')


def test_only_the_main_process_says_it(tmp_path):
    """A process forked from the one that attached the notice inherits it but prints
    nothing (a pool of such workers: one line each otherwise); the main process, missing
    later, says it."""
    (tmp_path / "noticekernels.py").write_text(KERNELS)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    run = subprocess.run([sys.executable, "-c", FORKED], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.count(LINE) == 1, run.stderr
    assert run.stderr.index(LINE) > run.stderr.index("worker done")
    assert "main done True" in run.stderr
    assert len(list((tmp_path / "numba").rglob("*square*.nbi"))) == 1  # main missed too


def _cli(cache: Path, out: Path) -> str:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from analysis.cli import main; sys.exit(main())",
         "evaluate", "configs/dimuon.yaml", "--output", str(out)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stderr


@pytest.mark.slow
def test_the_command_line_says_it_before_a_cold_run_only(tmp_path):
    cold = _cli(tmp_path / "numba", tmp_path / "a")
    assert cold.count(LINE) == 1, cold
    assert cold.index(LINE) == 0  # before anything else: the silence is after it
    assert LINE not in _cli(tmp_path / "numba", tmp_path / "b")
