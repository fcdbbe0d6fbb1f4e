"""Every shipped config runs (issue 37, class 3): ``evaluate`` and (for those with an
objective) ``optimize --steps 1`` of each file in configs/ exit 0 within an address-space limit (``demo_score.yaml``,
~1,050 trainable score weights, asked for 100 GB before ``evaluate`` chose values
only beyond the forward-mode bound, as ``optimize`` chooses reverse mode).

Slow (each file is a full pass; generated data are made on first use, under
data/generated/, as the configs' comments say)."""

from __future__ import annotations

import json
import resource
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import opt_helpers as H

CONFIGS = sorted((H.REPO / "configs").glob("*.yaml"))
ADDRESS_SPACE = 24 * 2**30  # JAX reserves address space well beyond what it touches


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(H.cli_command(*args), cwd=H.REPO, env=H.cli_env(),
                          capture_output=True, text=True, timeout=1200, preexec_fn=_limited)


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_evaluate_and_one_optimize_step(config: Path, tmp_path):
    proc = _run("evaluate", str(config), "-o", str(tmp_path / "evaluate"), "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "evaluate" / "results.json").read_text())
    assert results["datasets"]
    if "objective" not in yaml.safe_load(config.read_text()):
        return  # an evaluate-only config: optimize refuses it in one line, by design
    proc = _run("optimize", str(config), "-o", str(tmp_path / "optimize"), "--quiet",
                "--no-plots", "--steps", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "optimize" / "results.json").exists()


def test_evaluate_chooses_values_only_beyond_the_forward_mode_bound():
    """The rule ``optimize`` switches to reverse mode by (fast; the slow test above runs
    demo_score.yaml, whose forward mode asked for 100 GB)."""
    from types import SimpleNamespace

    from analysis.cli.commands import _evaluate_order
    from analysis.stats.derive import AUTO_FORWARD_MAX

    def plan(n):
        return SimpleNamespace(trainable_names=[f"p{i}" for i in range(n)])

    assert _evaluate_order(plan(AUTO_FORWARD_MAX)) == (1, None)
    order, note = _evaluate_order(plan(1053))
    assert order == 0 and note.startswith("1053 trainable parameters, more than the 16")
