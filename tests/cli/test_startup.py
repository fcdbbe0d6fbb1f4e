"""The command line starts without the heavy libraries (issue 35): importing
``analysis.cli``, ``--help`` and ``--version`` load none of JAX, coffea, numba,
matplotlib, awkward, uproot (checked on ``sys.modules`` of a fresh process; the times
are measured by benchmarks/bench_startup.py, not here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import analysis
from tests.conftest import load_script, modules_loaded

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("jax", "coffea", "numba", "matplotlib", "awkward", "uproot")


def _loaded(code: str) -> list[str]:
    return modules_loaded(code, HEAVY)


def test_import_analysis_cli_loads_no_heavy_module():
    assert _loaded("import analysis.cli") == []


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_load_no_heavy_module(flag):
    code = (f"import sys; sys.argv = ['diffcoffea', {flag!r}]\n"
            "from analysis.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0\n")
    assert _loaded(code) == []


def test_version_is_the_distribution_version():
    out = subprocess.run([sys.executable, "-m", "analysis", "--version"], cwd=ROOT,
                         capture_output=True, text=True, check=True, timeout=300).stdout
    from importlib.metadata import version

    assert out.strip() == f"diffcoffea {version('diffcoffea')}" == f"diffcoffea {analysis.__version__}"


def test_jax_is_float64_when_imported_after_analysis_and_cached_once_configured():
    # importing analysis sets x64 alone; analysis.runtime.configure() (the command line's,
    # the driver's) turns JAX's persistent cache on
    code = ("import analysis, os\nimport jax, jax.numpy as jnp\n"
            "assert jax.config.jax_enable_x64 and jnp.ones(1).dtype == jnp.float64\n"
            "assert jax.config.jax_compilation_cache_dir is None\n"
            "import analysis.runtime\nanalysis.runtime.configure()\n"
            "assert jax.config.jax_compilation_cache_dir == os.environ['DIFFCOFFEA_JAX_CACHE']\n")
    # without the cache settings this test process exported (tests/conftest.py configures it)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE", "DIFFCOFFEA_JAX"))}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=300)


def test_bench_startup_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DIFFCOFFEA_BENCH_RESULTS", str(tmp_path))
    bench = load_script(ROOT / "benchmarks" / "bench_startup.py")
    result = bench.main(["--repeat", "1"])
    assert set(result["figures"]) >= {"diffcoffea --help", "refuse an invalid config"}
    assert (tmp_path / "startup.help.json").exists() and (tmp_path / "startup.refuse.json").exists()


def test_the_yaml_pipeline_does_not_load_the_pass_weight_kernels():
    """``from processors import DiffProcessor`` (the YAML pipeline's processor) leaves the
    hand-written processors, and with them analysis.soft's compiled pass-weight kernels
    (~0.4 s to load in a new process), unimported; they load on first use."""
    kernels = ("analysis.soft", "analysis.select.singlekernels")
    assert modules_loaded("from processors import DiffProcessor", kernels) == []
    # analysis.soft itself loads the kernels on first use only (tests/test_extras.py)
    assert modules_loaded("from processors import JetMomentsProcessor", kernels) == [
        "analysis.soft"]
