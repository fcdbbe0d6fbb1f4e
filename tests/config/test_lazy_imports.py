"""Loading a config without a likelihood, and the optimisation loop, do not import the
likelihood's solvers (evermore, optimistix, flax: ~2 s of every command's start-up)."""

from __future__ import annotations

from tests.conftest import modules_loaded

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
