"""A new process's first optimisation step: the objective's program and the optimiser's
update are not rebuilt op by op or traced again (issue 35, start-up).

References: the objective's program built in memory only (the same computation, never
stored) to the last bit, and optax's eager update to 1e-12 (a jitted update may round
differently in the last place); the program store's files (an executable, one per
configuration that changes the objective) and a tracing counter (a program found on
disk is loaded, not traced).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from analysis.driver.runner import Evaluator
from analysis.optimize import objectives
from analysis.optimize.loop import jitted_update, update_description
from analysis.optimize.objectives import Objective, objective_from_states
from analysis.stats import _stored
from tests import opt_helpers as H
from tests.stats.test_stored_programs import store  # noqa: F401  (the fixture)

POINT = {"jet_pt_min": 35.0, "jet_abs_eta_max": 2.2, "btag_min": 0.25, "min_jets": 2.3}


def _counting(monkeypatch, module, name: str) -> list:  # noqa: ANN001
    """``module.name`` wrapped to note each call (a program that is traced calls it)."""
    calls: list = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.fixture(scope="module")
def states(small_data):  # noqa: ANN001, ANN201
    ev = Evaluator(H.make_config(small_data))
    return ev, ev.run(POINT, widths=np.array(H.WIDTHS), order=1)


def _objective(small_data, ev, sigma_b: float = 0.2) -> Objective:  # noqa: ANN001
    cfg = H.make_config(small_data, objective={"terms": [{"type": "significance",
                                                          "sigma_b": sigma_b}]})
    return Objective(cfg, ev.plan)


def _kinds(where) -> list[str]:  # noqa: ANN001
    out = []
    for name in sorted(os.listdir(where)):
        found = _stored.kind(str(where / name))
        out.append(found if found == _stored.EXECUTABLE else "portable")
    return out


def _same(a: dict, b: dict) -> None:
    assert a["objective"] == b["objective"] and a["significance"] == b["significance"]
    np.testing.assert_array_equal(a["grad"], b["grad"])
    assert a["yields"] == b["yields"]


def test_the_objective_s_program_is_stored_and_a_new_process_loads_it_untraced(
        small_data, states, store, monkeypatch) -> None:  # noqa: ANN001, F811
    ev, st = states
    monkeypatch.setattr(_stored, "directory", lambda: None)  # built in memory only
    reference = objective_from_states(_objective(small_data, ev), st, order=1)
    monkeypatch.undo()
    _stored._CALLS.clear()

    first = objective_from_states(_objective(small_data, ev), st, order=1)
    _same(first, reference)
    assert _kinds(store) == [_stored.EXECUTABLE]

    traced = _counting(monkeypatch, objectives, "dataset_stats")
    _stored._CALLS.clear()  # what a new process starts with
    again = objective_from_states(_objective(small_data, ev), st, order=1)
    assert traced == []  # loaded, not traced
    _same(again, reference)

    # what changes the objective changes the program's file
    other = _objective(small_data, ev, sigma_b=0.3)
    objective_from_states(other, st, order=1)
    built = len(traced)
    scaled = _objective(small_data, ev)
    scaled.variance_scale = 0.7
    objective_from_states(scaled, st, order=1)
    assert len(_kinds(store)) == 3 and 0 < built < len(traced)  # each traced once


def test_a_stored_call_is_kept_as_an_executable_where_jax_s_cache_holds_it(store) -> None:  # noqa: ANN001, F811
    """A program whose file is gone but whose compilation JAX's persistent cache holds
    (another version of this package) is compiled afresh, not read from that cache (an
    executable from it serializes without its kernels: the portable form, which cost a
    new process seconds to lower and compile again)."""
    x = jnp.arange(5.0) + 0.25

    def fun(v, *, power):  # noqa: ANN001, ANN202
        return {"s": jnp.sum(v**power), "c": jnp.cumsum(v)}

    first = _stored.stored_call("test_startup", fun, x, power=3)
    (name,) = os.listdir(store)
    os.remove(store / name)
    _stored._CALLS.clear()
    jax.clear_caches()  # a new process; JAX's files stay
    again = _stored.stored_call("test_startup", fun, x, power=3)
    assert _kinds(store) == [_stored.EXECUTABLE]
    _stored._CALLS.clear()
    loaded = _stored.stored_call("test_startup", fun, x, power=3)
    for out in (again, loaded):
        assert float(out["s"]) == float(first["s"]) == float(np.sum(np.asarray(x) ** 3))
        np.testing.assert_array_equal(out["c"], np.cumsum(np.asarray(x)))


@pytest.mark.parametrize("opt", [
    optax.adam(optax.cosine_decay_schedule(0.05, 10, alpha=0.1)),
    optax.sgd(0.1, momentum=0.9),
], ids=["adam+schedule", "sgd+momentum"])
def test_the_jitted_update_follows_optax_s_eager_update(opt) -> None:  # noqa: ANN001
    opt = optax.with_extra_args_support(opt)
    rng = np.random.default_rng(3)
    u_eager = u_jit = jnp.asarray([0.2, 0.5, 0.9])
    s_eager = s_jit = opt.init(u_eager)
    step = jitted_update(opt)
    for _ in range(6):
        g = jnp.asarray(rng.normal(size=3))
        updates, s_eager = opt.update(g, s_eager, u_eager, value=1.5, hessian=None)
        u_eager = optax.apply_updates(u_eager, updates)
        u_jit, s_jit = step(g, s_jit, u_jit, 1.5)
    np.testing.assert_allclose(np.asarray(u_jit), np.asarray(u_eager), rtol=1e-12, atol=0)
    for a, b in zip(jax.tree_util.tree_leaves(s_jit), jax.tree_util.tree_leaves(s_eager)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=0)


def test_the_update_s_program_is_stored_and_a_new_process_loads_it_untraced(
        store, monkeypatch) -> None:  # noqa: ANN001, F811
    """With a description of its optimiser, the jitted update is kept on disk: the same
    bits as ``jax.jit`` of the same update (the same program), and a new process loads
    it without tracing the optimiser's update."""
    opt = optax.with_extra_args_support(optax.adam(optax.cosine_decay_schedule(0.05, 10)))
    calls: list = []
    traced = optax.GradientTransformationExtraArgs(
        opt.init, lambda *a, **k: calls.append(1) or opt.update(*a, **k))

    def run(step) -> list:  # noqa: ANN001
        rng = np.random.default_rng(5)
        u = jnp.asarray([0.2, 0.5, 0.9])
        state = opt.init(u)
        out = []
        for _ in range(4):
            u, state = step(jnp.asarray(rng.normal(size=3)), state, u, 1.5)
            out.append([np.asarray(x) for x in jax.tree_util.tree_leaves((u, state))])
        return out

    reference = run(jitted_update(opt))
    first = run(jitted_update(traced, "adam, cosine 0.05/10"))
    assert _kinds(store) == [_stored.EXECUTABLE] and calls
    calls.clear()
    _stored._CALLS.clear()  # what a new process starts with
    again = run(jitted_update(traced, "adam, cosine 0.05/10"))
    assert calls == []  # loaded, not traced
    for got in (first, again):
        for a, b in zip(got, reference, strict=True):
            for x, y in zip(a, b, strict=True):
                np.testing.assert_array_equal(x, y)
    run(jitted_update(traced, "adam, cosine 0.1/10"))  # another description: its own
    assert len(_kinds(store)) == 2 and calls


def test_the_update_s_description_holds_what_the_optimiser_is_made_of(
        small_data, monkeypatch) -> None:  # noqa: ANN001
    """Each field of ``config.optimizer`` and optax's version change the key of the
    stored update (an old program is never the update of another optimiser)."""
    base = H.make_config(small_data)
    key = update_description(base)
    for change in ({"learning_rate": 0.07}, {"name": "sgd"},
                   {"schedule": {"name": "cosine_decay_schedule", "kwargs": {"decay_steps": 9}}},
                   {"kwargs": {"b1": 0.8}}, {"steps": 7}):
        cfg = H.make_config(small_data)
        for name, value in change.items():
            setattr(cfg.optimizer, name, type(getattr(base.optimizer, name, None))(value)
                    if name in ("learning_rate", "steps") else value)
        assert update_description(cfg) != key, change
    monkeypatch.setattr(optax, "__version__", "0.0.1")
    assert update_description(base) != key


def test_the_report_s_program_is_stored_and_a_new_process_loads_it_untraced(
        states, store, monkeypatch) -> None:  # noqa: ANN001, F811
    from analysis.pipeline import results

    ev, st = states
    monkeypatch.setattr(_stored, "directory", lambda: None)  # built in memory only
    results._report_derivatives.cache_clear()
    reference = results.dataset_report(st["ttbar"], ev.plan)
    monkeypatch.undo()
    _stored._CALLS.clear()
    results._report_derivatives.cache_clear()

    first = results.dataset_report(st["ttbar"], ev.plan)
    assert first == reference
    assert _kinds(store) == [_stored.EXECUTABLE]
    traced = _counting(monkeypatch, results, "statistics")
    _stored._CALLS.clear()  # what a new process starts with
    results._report_derivatives.cache_clear()
    assert results.dataset_report(st["ttbar"], ev.plan) == reference
    assert traced == []  # loaded, not traced
    results._report_derivatives.cache_clear()


def test_the_pass_table_s_program_is_stored_and_a_new_process_loads_it_untraced(
        store, monkeypatch) -> None:  # noqa: ANN001, F811
    """The numba backend's count-pass table (and its threshold tangents), a JAX program
    of the count model: kept on disk, loaded by a new process without tracing, the same
    values as the program built in memory."""
    from analysis.pipeline.backends.numba import _fasttables
    from analysis.select.objects import Count, CountModel, ObjectSet

    model = CountModel(sets=(ObjectSet(name="jets", collection="Jet", parent=None),),
                       counts=(Count(sets=("jets",), op=">=", cap=4),))
    th, w = jnp.asarray([2.3]), jnp.asarray([1.0])

    def fresh():  # what a new process starts with
        _stored._CALLS.clear()
        _fasttables._pass_fn.cache_clear()

    monkeypatch.setattr(_stored, "directory", lambda: None)  # built in memory only
    fresh()
    reference = _fasttables._pass_fn(model)(th, w)
    monkeypatch.undo()
    fresh()
    first = _fasttables._pass_fn(model)(th, w)
    assert _kinds(store) == [_stored.EXECUTABLE]
    traced = _counting(monkeypatch, _fasttables, "_jax_pass_table")
    fresh()
    again = _fasttables._pass_fn(model)(th, w)
    assert traced == []
    for out in (first, again):
        for a, b in zip(out, reference, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    other = CountModel(sets=model.sets, counts=(Count(sets=("jets",), op=">=", cap=3),))
    _fasttables._pass_fn(other)(th, w)
    assert len(_kinds(store)) == 2 and traced  # another model: another program
    fresh()
