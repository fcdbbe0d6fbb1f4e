"""analysis.runtime.childenv: a child process imports this package and keeps the caller's path.

Reference: the package's own location as Python's import system reports it, and a
child interpreter's ``sys.path`` (run for real, not inferred).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import analysis
from analysis.runtime.childenv import ROOT, child_env


def test_root_first_then_the_caller_s_entries_and_extras() -> None:
    assert Path(ROOT) == Path(analysis.__file__).resolve().parents[1]
    env = child_env({"PYTHONPATH": "/deps/a" + os.pathsep + "/deps/b", "HOME": "/h"}, X="1")
    assert env["PYTHONPATH"].split(os.pathsep) == [ROOT, "/deps/a", "/deps/b"]
    assert (env["HOME"], env["X"]) == ("/h", "1")
    assert child_env({})["PYTHONPATH"] == ROOT


def test_a_child_imports_this_package_and_sees_the_caller_s_path(tmp_path: Path) -> None:
    extra = tmp_path / "deps"
    extra.mkdir()
    (extra / "only_on_the_caller_s_path.py").write_text("")
    env = child_env({**os.environ, "PYTHONPATH": str(extra)})
    code = "import analysis, only_on_the_caller_s_path; print(analysis.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=True)
    assert Path(out.stdout.strip()).resolve() == Path(analysis.__file__).resolve()
