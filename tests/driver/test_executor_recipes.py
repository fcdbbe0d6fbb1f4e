"""Every executor recipe the docs show for an own processor runs as written or refuses
at once in one line, under a timeout (a hang fails the test instead of the suite):

- a process forked after JAX started refuses ``stats.derive`` in one line naming the
  ``spawn`` fix (fast: ``os.fork`` directly); a fork before JAX started does not;
- (slow) on the real ttbar file: the iterative executor, ``FuturesExecutor(workers=2)``,
  a kept pool made with ``spawn`` (two passes), dask, each equal to the iterative pass
  (1e-12); a kept pool made with ``fork`` refuses with the same line, for an own
  processor and for the YAML engine's ``DiffProcessor``: the script's last line, with
  none of coffea's wrapping ("Failed processing file"), retries or printed traceback;
- (slow) the YAML engine on Parsl from a venv that is not activated (its ``bin`` off
  ``PATH``) runs, and ``--quiet`` prints nothing (no JAX fork warning).

Reference: the iterative pass in the same process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from analysis.runtime import forkguard
from tests.opt_helpers import cli_env

HERE = Path(__file__).parent
REPO = HERE.parents[1]

FORK_SCRIPT = r"""
import os, sys
import numpy as np
from analysis import stats
from analysis.runtime import forkguard

def fn(theta):
    return {"s": stats.moments(np.arange(5.0), weight=np.ones(5) * theta["a"])}

if sys.argv[1] == "started":
    stats.derive(fn, {"a": 1.0})  # JAX has started in the parent
pid = os.fork()
if pid == 0:
    if sys.argv[1] == "started":
        try:
            stats.derive(fn, {"a": 1.0})
        except forkguard.ForkAfterJaxError as err:
            os.write(1, ("refused: " + str(err) + "\n").encode())
            os._exit(0)
        os._exit(5)
    os._exit(0 if not forkguard.forked_after_jax() else 6)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("parent", ["started", "fresh"])
def test_a_fork_after_jax_started_refuses_in_one_line(parent):
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", FORK_SCRIPT, parent],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    if parent == "started":
        line = done.stdout.strip()
        assert line.count("\n") == 0 and "mp_context=multiprocessing.get_context(\"spawn\")" in line


def recipe(name: str, shared_data: Path, timeout: float = 400):
    path = str(shared_data / "nanoAOD_2015_CMS_Open_Data_ttbar.root")
    return subprocess.run([sys.executable, "-W", "ignore", str(HERE / "_recipe.py"), name, path],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["iterative", "futures", "spawn_pool", "dask"])
def test_documented_recipes_run_and_agree(name, shared_data):
    done = recipe(name, shared_data)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [[float(x) for x in ln.split()[1:]] for ln in done.stdout.split("\n")
             if ln.startswith("RESULT ")]
    reference, *rest = lines
    assert rest
    for got in rest:
        assert got == pytest.approx(reference, rel=1e-12, abs=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fork_pool", "yaml_fork_pool"])
def test_a_kept_fork_pool_refuses_instead_of_hanging(name, shared_data):
    done = recipe(name, shared_data, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last == "analysis.runtime.forkguard.ForkAfterJaxError: " + forkguard.MESSAGE, done.stderr[-3000:]
    assert "Failed processing" not in done.stderr and "Performed attempt" not in done.stderr
    # the traceback is the script's own, not the worker's sent back above it
    assert "_RemoteTraceback" not in done.stderr and done.stderr.count("Traceback") == 1


@pytest.mark.slow
def test_parsl_from_a_venv_that_is_not_activated(tmp_path):
    pytest.importorskip("parsl")
    env = cli_env()
    here = str(Path(sys.executable).parent)
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if p and p != here)
    done = subprocess.run(
        [sys.executable, "-m", "analysis", "evaluate", "configs/ttbar.yaml", "--executor",
         "parsl", "--workers", "1", "--quiet", "--output", str(tmp_path / "out")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "os.fork()" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
