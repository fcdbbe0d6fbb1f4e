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
from analysis.pipeline.request import Request
from analysis.select import cuts
from tests.conftest import numba_refusal, one_line_error

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
    data = _ttbar()
    data["observables"].append({"name": "mjj", "x": "mass(Jet[0] + Jet[1])",
                                "stats": ["mean"]})
    data["histograms"] = [{"name": "hmjj", "x": "mass(Jet[0] + Jet[1])",
                           "edges": [0, 100, 200, 400]}]
    path = tmp_path / "numba.yaml"
    path.write_text(yaml.safe_dump({**data, "engine": {"backend": "numba"}}))
    plan = build_plan(load_config(path))
    why = numba_refusal(plan, 1)
    assert why == ("histogram 'hmjj': no numba rule for histograms of kind 'call' (rules for: "
                   "branch, count, field, index, sum)")
    with pytest.raises(Exception, match="the numba kernel cannot compute this plan: "
                                        "histogram 'hmjj': no numba rule"):
        with Evaluator(load_config(path), chunksize=100) as ev:
            ev.run(order=1)
    assert main(["evaluate", str(path), "--quiet", "-o", str(tmp_path / "out")]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "histogram 'hmjj': no numba rule for histograms of kind 'call'" in line
    # auto: the JAX backend computes it
    with Evaluator(load_config(path), chunksize=100, backend="auto") as ev:
        state = ev.run(order=1)["ttbar"]
    assert float(state.derived.value["selected_sumw"]) > 0
    assert Backend("auto").chooser.refusal(plan, Request(
        np.zeros(len(plan.param_names)), np.zeros(plan.n_widths))) == why
