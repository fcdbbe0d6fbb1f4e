"""An optimisation step computes only what its objective reads.

Terms declare the observables they read (:meth:`analysis.config.terms.Term.reads`); the
steps between the first and the last leave the others out
(:func:`analysis.pipeline.plan.only_observables`), which must change no number the
optimisation sees: the same history bit for bit, the same selection, yields and kept
observables as the full plan, and every observable in the final evaluation.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from analysis.config.terms import PythonTerm, SignificanceTerm, TargetTerm
from analysis.driver.runner import Evaluator
from analysis.optimize.loop import Optimization
from analysis.optimize.objectives import Objective
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.plan import only_observables
from tests import opt_helpers as H
from tests.chunked_helpers import read_columns

OBSERVABLES = [
    {"name": "jet_pt", "x": "Jet.pt", "stats": ["mean", "std"]},
    {"name": "jet_eta", "x": "Jet.eta", "stats": ["mean", "skew", "kurtosis"]},
    {"name": "ht", "x": "sum(Jet.pt)", "stats": ["mean", "std"]},
]


def test_terms_declare_what_they_read():
    assert SignificanceTerm().reads() == frozenset()
    assert TargetTerm(stat="ttbar.jet_eta.kurtosis", value=1.0).reads() == {"jet_eta"}
    assert TargetTerm(stat="ttbar.jet_pt_eta.linear_fit.slope", value=1.0).reads() == {
        "jet_pt_eta"}
    assert TargetTerm(stat="dy.yield", value=1.0).reads() == frozenset()
    assert PythonTerm(function="pkg.mod:fn").reads() is None  # may read anything


def _spy(ev: Evaluator) -> list:
    calls: list = []
    run = ev.run

    def spy(*args, observables=None, **kw):
        calls.append(observables)
        return run(*args, observables=observables, **kw)

    ev.run = spy  # type: ignore[method-assign]
    return calls


def _optimise(cfg, outdir, *, reduce: bool = True, initial: bool = True):
    ev = Evaluator(cfg)
    calls = _spy(ev)
    run = Optimization(cfg, ev, outdir, initial_observables=initial)
    if not reduce:
        run.step_observables = None
    while not run.done:
        run.do_step()
    final = run.final()
    return run, calls, final


@pytest.mark.parametrize("terms, kept", [
    ([{"type": "significance", "sigma_b": 0.1}], ()),
    ([{"type": "significance", "sigma_b": 0.1},
      {"type": "target", "stat": "ttbar.jet_eta.skew", "value": 0.1, "weight": 0.5}],
     ("jet_eta",)),
])
def test_steps_leave_out_what_no_term_reads(small_data, tmp_path, terms, kept):
    cfg = H.make_config(small_data, observables=OBSERVABLES, objective={"terms": terms},
                        optimizer={"steps": 4})
    run, calls, final = _optimise(cfg, tmp_path / "reduced")
    assert run.step_observables == kept
    # every observable at the first and the last step and in the final evaluations
    assert calls == [None, kept, kept, None, None, None]
    full, full_calls, full_final = _optimise(cfg, tmp_path / "full", reduce=False)
    assert full_calls == [None] * 6
    # the same optimisation, bit for bit: objectives, gradients, parameters, yields
    assert H.comparable_history(run.history) == H.comparable_history(full.history)
    assert final == full_final
    for st in run.final_states.values():
        assert set(st.derived.value["observables"]) == {o["name"] for o in OBSERVABLES}


def test_without_plots_the_first_step_leaves_them_out_too(small_data, tmp_path, monkeypatch):
    """``initial_observables=False`` (the command line's ``--no-plots``: no initial
    histogram to draw): the first step computes only what the objective reads, and the
    optimisation is the same bit for bit."""
    cfg = H.make_config(small_data, observables=OBSERVABLES,
                        objective={"terms": [{"type": "significance", "sigma_b": 0.1}]},
                        optimizer={"steps": 4})
    run, calls, final = _optimise(cfg, tmp_path / "lean", initial=False)
    assert calls == [(), (), (), None, None, None] and run.initial_states is None
    full, full_calls, full_final = _optimise(cfg, tmp_path / "full")
    assert full_calls[0] is None and full.initial_states is not None
    assert H.comparable_history(run.history) == H.comparable_history(full.history)
    assert final == full_final

    from analysis.cli.parser import main
    from analysis.optimize import loop
    from tests.conftest import write_config

    seen = []
    init = loop.Optimization.__init__

    def spy(self, *a, **k):
        seen.append(k.get("initial_observables", True))
        init(self, *a, **k)

    monkeypatch.setattr(loop.Optimization, "__init__", spy)
    path = write_config(tmp_path / "opt.yaml", H.config_dict(small_data, optimizer={"steps": 1}))
    for flags in ([], ["--no-plots"]):
        assert main(["optimize", str(path), "-o", str(tmp_path / "cli"), "--quiet",
                     "--overwrite", *flags]) == 0
    assert seen == [True, False]  # the command line's plots decide


def test_a_python_term_keeps_every_observable(small_data, tmp_path):
    terms = [{"type": "significance"},
             {"type": "python", "function": "tests.userlosses:soft_ratio", "weight": 0.5}]
    cfg = H.make_config(small_data, observables=OBSERVABLES, objective={"terms": terms})
    run = Optimization(cfg, Evaluator(cfg), tmp_path)
    assert run.objective.reads() is None and run.step_observables is None


@pytest.mark.parametrize("engine", ["numba", "jax"])
def test_the_reduced_plan_keeps_selection_yields_and_kept_observables(small_data, engine):
    # the full plan's states are checked against awkward and enumeration elsewhere;
    # here: the plan without some observables gives the same floats for what it keeps
    cfg = H.make_config(small_data, observables=OBSERVABLES)
    ev = Evaluator(cfg)
    plan = ev.plan
    reduced = only_observables(plan, {"ht", "jet_eta"})
    assert [o.name for o in reduced.observables] == ["jet_eta", "ht"]
    assert reduced.sets.orders == plan.sets.orders[1:] == (4, 2)
    assert only_observables(plan, {o["name"] for o in OBSERVABLES}) is plan
    theta, widths = ev.theta_and_widths()
    for path in sorted(small_data.glob("*/*.root"))[:2]:
        cols = read_columns(path, plan)
        a = chunk_state(cols, plan, theta, widths, backend=engine).derived
        b = chunk_state(cols, reduced, theta, widths, backend=engine).derived
        for key in ("selected_sumw", "selected_sumw2"):
            np.testing.assert_array_equal(a.value[key], b.value[key])
            np.testing.assert_array_equal(a.jac[key], b.jac[key])
        for tree in ("value", "jac"):
            pa = {k: getattr(a, tree)["observables"][k] for k in ("jet_eta", "ht")}
            pb = getattr(b, tree)["observables"]
            for la, lb in zip(jax.tree_util.tree_leaves(pa), jax.tree_util.tree_leaves(pb),
                              strict=True):
                np.testing.assert_array_equal(la, lb)


def test_objective_reads_is_the_union(small_data):
    cfg = H.make_config(small_data, observables=OBSERVABLES, objective={"terms": [
        {"type": "target", "stat": "ttbar.jet_pt.mean", "value": 50.0},
        {"type": "target", "stat": "dy.ht.std", "value": 10.0},
        {"type": "target", "stat": "dy.yield", "value": 10.0}]})
    assert Objective(cfg, Evaluator(cfg).plan).reads() == {"jet_pt", "ht"}


def test_a_pass_with_every_observable_runs_the_steps_objective_program(small_data):
    """The first and last steps' passes (every observable) and the others' (those the
    terms read) give the objective the same numbers, so one program serves both: the
    same floats bit for bit, one program compiled (not one per pass kind)."""
    from analysis.optimize.objectives import objective_from_states
    from analysis.stats import _programs

    # (sigma_b of no other test: a program of its own, not one another test compiled)
    terms = [{"type": "significance", "sigma_b": 0.137},
             {"type": "target", "stat": "ttbar.jet_eta.skew", "value": 0.1, "weight": 0.5}]
    cfg = H.make_config(small_data, observables=OBSERVABLES, objective={"terms": terms})
    with Evaluator(cfg) as ev:
        objective = Objective(cfg, ev.plan)
        full = ev.run(order=1)
        reduced = ev.run(order=1, observables=objective.reads())
    assert set(next(iter(full.values())).observables) == {o["name"] for o in OBSERVABLES}

    def programs():
        return sum(key[0] == "objective" for key in _programs._CALLS)

    before = programs()
    a = objective_from_states(objective, full)
    b = objective_from_states(objective, reduced)
    assert programs() == before + 1
    assert a["objective"] == b["objective"] and a["significance"] == b["significance"]
    assert a["yields"] == b["yields"]
    np.testing.assert_array_equal(a["grad"], b["grad"])
