"""``optimize`` without a likelihood does not import the likelihood's solvers at its first
step (:func:`analysis.optimize.lksection.floor_warning`, called there: evermore and
optimistix, ~0.85 s of CPU of the README main job)."""

from __future__ import annotations

from tests.conftest import modules_loaded

_SOLVERS = ("evermore", "optimistix", "analysis.likelihood")


def test_the_floor_warning_without_a_likelihood_loads_no_solver():
    code = ("from analysis.config.loader import load_config\n"
            "from analysis.optimize.lksection import floor_warning, warn_floor\n"
            "c = load_config('configs/demo.yaml')\n"
            "assert c.likelihood is None\n"
            "assert floor_warning(c, None, {}) is None\n"
            "warn_floor(c, None, {})\n")
    assert modules_loaded(code, _SOLVERS) == []


def test_with_a_likelihood_it_loads_them():
    # the check above can fail: a config with a likelihood reads the templates
    code = ("from analysis.config.loader import load_config\n"
            "from analysis.optimize.lksection import floor_warning\n"
            "c = load_config('configs/agc_likelihood.yaml')\n"
            "assert c.likelihood is not None\n"
            "floor_warning(c, None, {})\n")
    assert modules_loaded(code, _SOLVERS) == list(_SOLVERS)
