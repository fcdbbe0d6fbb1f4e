"""The state names a payload is aligned with (``analysis.pipeline.results.state_names``)
are those ``jax.tree_util`` flattens a chunk's value states to, on both backends."""

from __future__ import annotations

from pathlib import Path

import jax
import pytest

from analysis.config.loader import load_config
from analysis.driver.runner import empty_columns
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.pipeline.results import state_names
from analysis.stats.merge import is_state

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _flat_names(value) -> list[str]:
    paths = jax.tree_util.tree_flatten_with_path(value, is_leaf=is_state)[0]
    return [".".join(str(getattr(k, "key", k)) for k in path) for path, _ in paths]


@pytest.mark.parametrize("name", ["ttbar.yaml", "dimuon.yaml", "agc_ttbar_v12.yaml"])
def test_state_names_are_the_flattened_value_states(name, backend):
    path = CONFIGS / name
    config = load_config(path)
    plan = build_plan(config)
    theta = [config.parameters[p].init for p in plan.param_names]
    state = chunk_state(empty_columns(plan), plan, theta, initial_widths(config), order=0,
                        backend=backend)
    value = {k: v for k, v in state.derived.value.items()
             if k not in ("histograms", "templates")}
    assert state_names(plan) == _flat_names(value)
    assert "selected_sumw" in state_names(plan)
