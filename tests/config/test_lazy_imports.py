"""Loading a config without a likelihood, and the optimisation loop, do not import the
likelihood's solvers (evermore, optimistix, flax: ~2 s of every command's start-up)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import modules_loaded

REPO = Path(__file__).resolve().parents[2]
_SOLVERS = ("evermore", "optimistix", "flax")


def _imported(code: str) -> list[str]:
    return modules_loaded(code, _SOLVERS)


def test_demo_config_and_loop_leave_the_solvers_unloaded():
    code = (
        "from analysis.config.loader import load_config\n"
        "import analysis.optimize.loop, analysis.cli.commands\n"
        "c = load_config('configs/demo.yaml')\n"
        "assert c.likelihood is None and analysis.config.likelihood.build_model(c) is None\n"
    )
    assert _imported(code) == []


def test_a_likelihood_term_loads_them_when_used():
    # the default of discovery_significance.max_steps is the fit's own (read on use)
    code = (
        "from analysis.config.terms import DiscoverySignificanceTerm\n"
        "from analysis.likelihood.fit import MAX_STEPS\n"
        "assert DiscoverySignificanceTerm().max_steps == MAX_STEPS\n"
    )
    assert _imported(code) == list(_SOLVERS)


# The heavy libraries a config's loading and refusal must not load (issue 35: refusing a
# bad config at once; the time itself is measured by benchmarks/bench_startup.py).
_HEAVY = ("jax", "awkward", "numba", "coffea", "equinox", "matplotlib", "uproot")


@pytest.mark.parametrize("config", [
    "configs/demo.yaml", "configs/demo_score.yaml", "configs/agc_likelihood.yaml",
    "configs/ht_likelihood_v12.yaml", "configs/wmunu.yaml",
])
def test_loading_a_shipped_config_loads_no_heavy_module(config):
    code = f"from analysis.config.loader import load_config\nload_config({config!r})\n"
    assert modules_loaded(code, _HEAVY) == []


@pytest.mark.parametrize("command", ["evaluate", "optimize", "scan"])
def test_refusing_an_invalid_config_loads_no_heavy_module(tmp_path, command):
    # A typo in a full config (every section validated): exit 2 before JAX loads.
    bad = tmp_path / "bad.yaml"
    demo = (REPO / "configs" / "demo.yaml").read_text()
    text = demo.replace("objective:", "objectiv:", 1)
    assert text != demo
    bad.write_text(text)
    code = (f"import sys\nsys.argv = ['diffcoffea', {command!r}, {str(bad)!r}]\n"
            "from analysis.cli import main\n"
            "try:\n    rc = main()\nexcept SystemExit as e:\n    rc = e.code\n"
            "assert rc == 2, rc\n")
    assert modules_loaded(code, _HEAVY) == []


def test_the_check_sees_jax_when_a_statistic_is_computed():
    # The registry's statistics load JAX when used: the checks above can fail.
    code = ("from analysis.config.loader import load_config\n"
            "from analysis.spec.statistics import STATISTICS\n"
            "from analysis.stats import Moments\n")
    assert "jax" in modules_loaded(code, _HEAVY)


def test_the_optimisation_loop_leaves_equinox_and_matplotlib_unloaded():
    # equinox (0.3-0.6 s) only with a learned score: analysis.stats.MLP is imported on
    # first use; matplotlib only in the plot workers (analysis.cli.plotworker)
    code = ("import analysis.stats, analysis.optimize.loop, analysis.cli.commands\n"
            "import analysis.cli.report, analysis.cli.plots, analysis.pipeline.score\n"
            "import analysis.select.weights\n")
    assert modules_loaded(code, ("equinox", "matplotlib")) == []


def test_a_learned_score_loads_equinox_when_used():
    # the check above can fail: the network's class loads equinox, keeps its public name
    code = ("import pickle\nfrom analysis import stats\nnet = stats.mlp(2, hidden=(3,))\n"
            "assert type(net) is stats.MLP and stats.MLP.__module__ == 'analysis.stats.mlp'\n"
            "assert type(pickle.loads(pickle.dumps(net))) is stats.MLP\n"
            "from analysis.stats.mlp import MLP\nassert MLP is stats.MLP\n")
    assert modules_loaded(code, ("equinox",)) == ["equinox"]
