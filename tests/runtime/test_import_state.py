"""Importing any analysis module changes no process state beyond x64 (analysis.runtime).

A fresh process imports every module of ``analysis`` and ``processors`` and compares what
it can see of its own state before and after: the environment (only ``JAX_ENABLE_X64``
set), JAX's compilation cache directory (none), the garbage collector's frozen objects
(none), glibc's malloc thresholds (not applied), the fork hooks (not installed), the
Ctrl-C handler (Python's default). Then ``analysis.runtime.configure()`` does what the command line does: the cache
directory is exported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_CHILD = r"""
import gc, importlib, json, os, pkgutil, signal, sys

import jax  # first: what JAX itself sets at its import is not this package's doing

before = dict(os.environ)
names = []
for package in ("analysis", "processors"):
    mod = importlib.import_module(package)
    names.append(package)
    for info in pkgutil.walk_packages(mod.__path__, package + "."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
        names.append(info.name)
from analysis.runtime import allocator, forkguard

after = dict(os.environ)
state = {
    "modules": len(names),
    "environ": {k: after[k] for k in after if before.get(k) != after[k]},
    "removed": sorted(set(before) - set(after)),
    "jax_cache": jax.config.jax_compilation_cache_dir,
    "frozen": gc.get_freeze_count(),
    "malloc": list(allocator._APPLIED),
    "fork_hooks": bool(forkguard._state.get("installed")),
    "sigint_default": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
}
import analysis.runtime
analysis.runtime.configure()
state["configured_cache"] = os.environ.get("DIFFCOFFEA_JAX_CACHE")
print(json.dumps(state))
"""


@pytest.mark.slow  # imports every module (JAX, numba, coffea): ~20 s
def test_importing_every_module_changes_only_x64(tmp_path):
    numba_dir = tmp_path / "numba"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_", "DIFFCOFFEA_", "XLA_"))}
    env.update(NUMBA_CACHE_DIR=str(numba_dir), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    state = json.loads(out.stdout.strip().splitlines()[-1])
    assert state["modules"] > 100
    assert state["environ"] == {"JAX_ENABLE_X64": "1"} and state["removed"] == []
    assert state["jax_cache"] is None
    assert state["frozen"] == 0 and state["malloc"] == [] and not state["fork_hooks"]
    assert state["sigint_default"]
    assert state["configured_cache"] == str(tmp_path / "xdg" / "diffcoffea" / "jax")
