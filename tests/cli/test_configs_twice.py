"""Every shipped config runs twice over one program cache, in fresh processes (issue 54):
the second run loads what the first stored (JAX's persistent compilation cache, numba's
kernels) and must end as the first did. A second ``optimize`` of ``agc_likelihood.yaml``
or ``ht_likelihood_v12.yaml`` once died with a segmentation fault (exit 139): a stored
executable of the package's own program store (since removed) called XLA's LAPACK
routine before this process had registered it.

Every config is a full pass (or optimisation step) twice: all are marked slow."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import opt_helpers as H

CONFIGS = sorted((H.REPO / "configs").glob("*.yaml"))
# every config is slow (ht_likelihood_v12 alone: 145 s); the default run checks a
# program of the FFI kernels loaded from JAX's cache in a new process
# (tests/test_soft_fast_kernels.py)
FAST: set[str] = set()


def _twice(config: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = H.cli_env({"DIFFCOFFEA_JAX_CACHE": str(cache), "JAX_COMPILATION_CACHE_DIR": str(cache)})
    optimize = "objective" in yaml.safe_load(config.read_text())
    args = ["optimize", "--steps", "1", "--no-plots"] if optimize else ["evaluate"]
    outputs = []
    for run in ("first", "second"):
        out = tmp_path / run
        proc = subprocess.run(H.cli_command(*args, str(config), "-o", str(out), "--quiet"),
                              cwd=H.REPO, env=env, capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, f"{run} run: exit {proc.returncode}: {proc.stderr[-3000:]}"
        outputs.append(json.loads((out / "results.json").read_text()))
    assert any(cache.iterdir())  # the second run had a cache to load from
    key = "objective" if optimize else "datasets"
    assert json.dumps(outputs[0].get(key), sort_keys=True) == \
        json.dumps(outputs[1].get(key), sort_keys=True)


@pytest.mark.parametrize("config", [pytest.param(
    c, marks=() if c.name in FAST else pytest.mark.slow) for c in CONFIGS],
    ids=lambda p: p.name)
def test_twice_over_one_cache(config: Path, tmp_path):
    _twice(config, tmp_path)
