"""The lean install: the core runs without its extras, and a feature whose extra is
missing stops with one line naming it (:mod:`analysis.extras`).

The extras are taken away in a child process by an import hook that refuses their
modules (as a core-only install would not find them); the slow test installs the core
alone into a fresh venv and runs the README's own-processor example there.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA, modules_loaded

REPO = Path(__file__).resolve().parents[1]

# What `pip install diffcoffea` leaves out (the extras and the test data), and their deps.
EXTRA_MODULES = ("evermore", "optimistix", "flax", "orbax", "lineax", "dask", "distributed",
                 "parsl", "skhep_testdata")

_BLOCK = textwrap.dedent(f"""
    import importlib.abc, sys
    class _NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.partition(".")[0] in {EXTRA_MODULES!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
    sys.meta_path.insert(0, _NotInstalled())
""")


def _readme_processor() -> str:
    """The README's own-processor example (its first python block)."""
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)[0]


def _run_core(code: str, *args: str) -> subprocess.CompletedProcess:
    """``code`` in a child process that finds none of the extras' modules."""
    return subprocess.run([sys.executable, "-c", _BLOCK + code, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def test_import_soft_loads_neither_numba_nor_coffea():
    assert modules_loaded("import analysis.soft, analysis.stats",
                          ("numba", "coffea", "uproot", *EXTRA_MODULES)) == []


def test_the_check_sees_numba_once_a_kernel_runs():
    # pass_weights' compiled kernels load numba on first use: the check above can fail
    code = "import analysis.soft\nimport analysis.select.singlecall\n"
    assert modules_loaded(code, ("numba",)) == ["numba"]


def test_the_readme_processor_runs_on_the_core_alone():
    assert (SHARED_DATA / "nanoAOD_2015_CMS_Open_Data_ttbar.root").is_file()
    run = _run_core(_readme_processor())
    assert run.returncode == 0, run.stderr[-3000:]
    value, grad = eval(run.stdout.strip().splitlines()[-1])  # (mean, {param: d/dparam})
    assert 20 < value < 200 and set(grad) == {"pt_min", "eta_max"}


def test_the_blocker_is_effective():
    run = _run_core("import evermore")
    assert run.returncode != 0 and "No module named 'evermore'" in run.stderr


@pytest.mark.parametrize("module, extra", [("analysis.likelihood", "likelihood")])
def test_a_missing_extra_is_one_line_naming_it(module, extra):
    code = (f"from analysis.extras import MissingExtra\ntry:\n    import {module}\n"
            "except MissingExtra as err:\n    print('LINE', err)\n")
    run = _run_core(code)
    assert run.returncode == 0, run.stderr[-2000:]
    line = run.stdout.strip()
    assert line.startswith("LINE ") and "\n" not in line
    assert f"pip install 'diffcoffea[{extra}]'" in line and module in line


@pytest.mark.parametrize("shipped, executor, key, extra", [
    ("agc_likelihood.yaml", "iterative", "likelihood", "likelihood"),
    ("agc_ttbar_v12.yaml", "dask", "executor.type", "dask"),
    ("agc_ttbar_v12.yaml", "parsl", "executor.type", "parsl"),
])
def test_a_config_needing_a_missing_extra_exits_2_naming_key_and_extra(tmp_path, shipped,
                                                                        executor, key, extra):
    text = (REPO / "configs" / shipped).read_text()
    old = "executor: {type: iterative,"
    assert text.count(old) == 1 and ("\nlikelihood:" in text) == (extra == "likelihood")
    config = tmp_path / "c.yaml"
    config.write_text(text.replace(old, f"executor: {{type: {executor},"))
    code = ("import sys\nfrom analysis.cli import main\n"
            "sys.exit(main(['evaluate', sys.argv[1], '-o', sys.argv[2]]))\n")
    run = _run_core(code, str(config), str(tmp_path / "out"))
    assert run.returncode == 2, run.stderr[-2000:]
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, run.stderr
    assert key in lines[0] and f"pip install 'diffcoffea[{extra}]'" in lines[0], lines[0]
    assert "Traceback" not in run.stderr


@pytest.mark.slow
def test_a_fresh_venv_with_the_core_install_runs_the_readme_processor(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(REPO)], check=True,
                   timeout=1800)
    for module in EXTRA_MODULES:  # the core pulls in none of the extras
        found = subprocess.run([str(py), "-c", f"import {module}"], capture_output=True)
        assert found.returncode != 0, f"{module} came with the core install"
    run = subprocess.run([str(py), "-c", _readme_processor()], cwd=REPO, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    value, grad = eval(run.stdout.strip().splitlines()[-1])
    assert 20 < value < 200 and set(grad) == {"pt_min", "eta_max"}
