"""What the numba backend computes is derived from its rules (issue 32).

- a node kind without a rule is refused with its name and the kinds that have one,
  and registering a rule is what makes it served (the refusal is derived, not written);
- every node kind a shipped config uses has a rule, and every kind of the cut-kind
  registry with ``sides`` has one (its numba rule lives in its own file);
- support is decided once per pass, not per chunk (counted over a 4-chunk pass of a
  plan with histograms and a channel region);
- ``backend: numba`` reports a node without a rule as one line naming it, before any
  number is computed; ``auto`` runs it on the JAX backend.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.cli.parser import main
from analysis.config.loader import config_from_dict, load_config
from analysis.driver.runner import Evaluator
from analysis.pipeline.backend import Backend
from analysis.pipeline.backends.numba import rules
from analysis.pipeline.plan import build_plan
from analysis.pipeline.request import Replicas, Request
from analysis.select import cuts
from tests.conftest import numba_refusal, one_line_error
from tests.pipeline.test_fallback_said import WHY, with_bjets

CONFIGS = Path(__file__).resolve().parents[4] / "configs"


def _ttbar():
    return yaml.safe_load((CONFIGS / "ttbar.yaml").read_text())


def test_a_kind_without_a_rule_is_refused_by_name_until_one_is_registered(monkeypatch):
    plan = build_plan(config_from_dict(_ttbar()))
    assert numba_refusal(plan, 1) is None
    obs = plan.observables[0]
    odd = dataclasses.replace(obs, x=dataclasses.replace(obs.x, kind="fancy"))
    other = dataclasses.replace(plan, observables=(odd,) + plan.observables[1:])
    assert numba_refusal(other, 1) == (
        "observable 'jet_pt': no numba rule for observables of kind 'fancy' (rules for: "
        "branch, call, count, field, index, sum)")
    monkeypatch.setattr(rules, "RULES", dict(rules.RULES))
    rules.register("observable", "fancy")
    assert numba_refusal(other, 1) is None
    # a rule's limit is what refuses within a kind
    rules.register("observable", "fancy", lambda node, plan, req, opts: "too fancy")
    assert numba_refusal(other, 1) == "observable 'jet_pt': too fancy"


def test_every_kind_in_the_shipped_configs_and_every_cut_kind_with_sides_has_a_rule():
    for path in sorted(CONFIGS.glob("*.yaml")):
        plan = build_plan(load_config(path))
        for what, kind, _, _, _ in rules._nodes(plan, Request(
                np.zeros(len(plan.param_names)), np.zeros(plan.n_widths), order=0)):
            if what == "weight" and kind == "scale factor":
                continue  # per-object scale factors: the JAX backend's (no numba rule)
            rule = rules.cut_rule(kind) if what == "cut" else rules.RULES.get((what, kind))
            assert rule is not None, (path.name, what, kind)
    for kind in cuts.KINDS:
        for op in kind.ops:
            assert (rules.cut_rule(op) is not None) == hasattr(kind, "sides"), op


def test_support_is_decided_once_per_pass_not_per_chunk(monkeypatch):
    data = _ttbar()
    data["histograms"] = [{"name": "jpt", "x": "Jet.pt", "edges": [0, 50, 100, 200]}]
    data["likelihood"] = {"channels": {"sr": {"histogram": "jpt"}}}
    calls = []
    real = rules.refusal
    monkeypatch.setattr(rules, "refusal", lambda *a: calls.append(1) or real(*a))
    with Evaluator(config_from_dict(data), chunksize=50, backend="numba") as ev:
        assert len(ev.chunks) == 4
        calls.clear()
        ev.run(order=1)
        assert len(calls) == 1  # one prepare for the pass (its 4 chunks and both regions)


def test_backend_numba_names_the_node_without_a_rule_in_one_line(tmp_path, capsys):
    data = with_bjets(_ttbar())  # the leading jet and b-jet: two rank orders of the jets
    data["observables"].append({"name": "mjj", "x": "mass(Jet[0] + Jet[1])",
                                "stats": ["mean"]})
    path = tmp_path / "numba.yaml"
    path.write_text(yaml.safe_dump({**data, "engine": {"backend": "numba"}}))
    plan = build_plan(load_config(path))
    why = numba_refusal(plan, 1)
    assert why == WHY
    with pytest.raises(Exception, match="the numba backend cannot compute this states pass: "
                                        "histogram 'hj': sets of Jet"):
        with Evaluator(load_config(path), chunksize=100) as ev:
            ev.run(order=1)
    assert main(["evaluate", str(path), "--quiet", "-o", str(tmp_path / "out")]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "histogram 'hj': sets of Jet indexed by two ranking fields" in line
    # auto: the JAX backend computes it
    with Evaluator(load_config(path), chunksize=100, backend="auto") as ev:
        state = ev.run(order=0)["ttbar"]  # values: what it shows is that JAX runs it
    assert float(state.derived.value["selected_sumw"]) > 0
    assert Backend("auto").chooser.refusal(plan, Request(
        np.zeros(len(plan.param_names)), np.zeros(plan.n_widths))) == why


def test_backend_numba_is_strict_for_every_pass_kind(monkeypatch):
    """``backend: numba`` refuses a pass of every kind it does not serve (grids, entries
    for plots, selected weights, bootstrap replicas, pullbacks, yield gradients, states)
    in one line naming the node and what to change, before any chunk is read; ``auto``
    gives the same passes to the JAX backend."""
    import processors.diff_processor as dp
    from analysis.errors import InputError

    read = [0]
    real = dp.extract_columns
    monkeypatch.setattr(dp, "extract_columns", lambda *a, **k: read.__setitem__(0, read[0] + 1)
                        or real(*a, **k))
    # beyond the count's cap of 2: no numba rule serves it. The evaluator refuses such a
    # value first (analysis.config.values, as --set does); here the backend's own rule
    # is what is tested, so that check is passed by
    import analysis.driver.runner as runner

    monkeypatch.setattr(runner, "value_problem", lambda *a, **k: None)
    over = {"min_jets": 3}
    cap = r"count >= 2: count threshold 3\.0 beyond its cap 2"
    with Evaluator(config_from_dict(_ttbar()), chunksize=100, backend="numba") as ev:
        theta, w = ev.theta_and_widths(over)
        passes = [
            ("states", lambda: ev.run(over, order=0), cap),
            ("grid", lambda: ev.run_grid(theta[None]),
             "this pass: no numba rule for passes of kind 'grid'"),
            ("entries", lambda: ev.run_histograms(0, 5, 0.0, 100.0, over), cap),
            ("replicas", lambda: ev.run_replicas(over, replicas=3), cap),
            ("replicas", lambda: ev.run_replica_lanes([{}, over], replicas=3),
             r"this pass: at parameter point \[30\.0, 2\.4, 3\.0\]: " + cap),
            ("yield_gradients", lambda: ev.run_yield_gradients(over), cap),
        ]
        for kind, call, why in passes:
            with pytest.raises(InputError, match=rf"engine: the numba backend cannot compute "
                                                 rf"this {kind} pass: {why}.*; use backend "
                                                 r"'auto' \(numba where it can, JAX for the "
                                                 r"rest\) or 'jax'$") as info:
                call()
            assert "\n" not in str(info.value)
        assert read[0] == 0  # refused when prepared: no chunk was read
        chooser = ev.backend.chooser
        for req, why in ((Request(theta, w, order=0, selected=True), cap),
                         (Request(theta, w, order=0, pullback=[]),  # no payload: not yields
                          "this pass: the objective reads 0 payload entries")):
            with pytest.raises(ValueError, match=f"this {req.kind} pass: {why}.*use backend"):
                chooser.prepare(ev.plan, req)
    # auto: the same passes go to the JAX backend (chosen when prepared)
    auto = Backend("auto").chooser
    for req in (Request(theta, w, order=0), Request(theta[None], w * 0, order=0, grid=True),
                Request(theta, w, order=0, entries=0), Request(theta, w, order=0, selected=True),
                Request(theta, w, order=0, replicas=Replicas("sums", 3)),
                Request(np.stack([theta, theta]), w, order=0, replicas=Replicas("lanes", 3))):
        assert auto.prepare(ev.plan, req).engine.name == "jax", req.kind


def test_entries_and_selected_weights_of_a_plan_with_histograms_run_on_numba():
    """Entries for plots and selected weights do not read histograms: the numba backend
    serves them on a plan with histograms and a channel region, equal to the JAX
    backend's (1e-12), and a bootstrap pass's replicas too."""
    data = _ttbar()
    data["histograms"] = [{"name": "jpt", "x": "Jet.pt", "edges": [0, 50, 100, 200]}]
    data["likelihood"] = {"channels": {"sr": {"histogram": "jpt"}}}
    config = config_from_dict(data)
    plan = build_plan(config)
    for kind in ({"entries": 0}, {"selected": True}):
        assert numba_refusal(plan, 0, **kind) is None
    out = {}
    for name in ("numba", "jax"):
        with Evaluator(config, chunksize=100, backend=name) as ev:
            out[name] = (ev.run_histograms(0, 8, 0.0, 200.0)["ttbar"].values(),
                         ev.run_replicas(replicas=7)["ttbar"].sums)
    for a, b in zip(out["numba"], out["jax"]):
        assert np.any(a != 0)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
