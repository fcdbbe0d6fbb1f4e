"""Bounds of the fourth round (issue 54, item 5): replicas, the fit's templates x shape
systematics, integer (count) parameters on ``--set``, ``scan --grid`` and
``Evaluator.run``, non-finite grid points, contradictory flags, a schedule of 0 steps,
and ``assert_chunk_invariance`` on a chunk of 0 events. Each is one line, before
anything runs."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.cli.parser import main
from analysis.config.loader import ConfigError, config_from_dict
from analysis.config.values import value_problem
from analysis.errors import InputError
from analysis.limits import ENV_LIMIT, MAX_REPLICAS, ResourceError
from analysis.pipeline.bounds import check_fit
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config
from tests.likelihood.test_yaml_pipeline import lk_config


def _refused(cfg: dict) -> str:
    with pytest.raises(ConfigError) as err:
        config_from_dict(cfg)
    assert "\n" not in str(err.value)
    return str(err.value)


def _fails(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    return one_line_error(capsys.readouterr().err)


def test_replicas_are_bounded(tmp_path):
    cfg = H.config_dict(tmp_path, optimizer={"replicas": 10**8})
    assert _refused(cfg) == (f"<config>: optimizer.replicas: must be <= {MAX_REPLICAS}"
                             ", got 100000000")
    cfg["optimizer"]["replicas"] = MAX_REPLICAS
    config_from_dict(cfg)


def test_schedule_of_zero_decay_steps(tmp_path):
    sched = {"name": "cosine_decay_schedule", "kwargs": {"decay_steps": 0, "alpha": 0.1}}
    cfg = H.config_dict(tmp_path, optimizer={"schedule": sched})
    assert _refused(cfg) == ("<config>: optimizer.schedule.kwargs.decay_steps: expected a "
                             "whole number of steps >= 1, got 0")
    for bad in (2.5, True, "10", -3):
        cfg["optimizer"]["schedule"]["kwargs"]["decay_steps"] = bad
        assert "decay_steps: expected a whole number of steps" in _refused(cfg)
    cfg["optimizer"]["schedule"]["kwargs"]["decay_steps"] = 60
    config_from_dict(cfg)


def test_fit_counts_bins_times_shape_systematics(tmp_path, monkeypatch):
    """10**5 bins x 20 shape systematics, no MC statistics: the Hessian check alone
    (21 nuisances x 200,008 cells, 32 MB) let it through; it took 14 GB."""
    monkeypatch.setenv(ENV_LIMIT, "1024")
    cfg = lk_config(tmp_path)
    cfg["likelihood"]["mc_stat"] = False
    cfg["histograms"][0] = {"name": "lead", "x": "jets[0].pt",
                            "bins": {"n": 100000, "lo": 0, "hi": 400}}
    cfg["systematics"] = [{"name": f"s{i}", "type": "weight", "up": "PSWeight[0]",
                           "down": "PSWeight[2]"} for i in range(20)]
    with pytest.raises(ResourceError) as err:
        check_fit(config_from_dict(cfg, base_dir=tmp_path))
    assert str(err.value).startswith(
        "<config>: systematics: implies the profile fit's template tangents: 8200328 template "
        "bins (200008 sample bins x (1 + 2 x 20 shape systematics)) x 20 nuisances = 1.22 GB")
    assert "\n" not in str(err.value)
    cfg["systematics"] = cfg["systematics"][:2]
    check_fit(config_from_dict(cfg, base_dir=tmp_path))  # 5 templates per bin: 32 MB


# --- integer parameters: --set, --grid, Evaluator.run ---------------------------------------


@pytest.fixture
def config_path(tmp_path):
    return write_config(tmp_path / "c.yaml", H.config_dict(tmp_path))


@pytest.mark.parametrize("item, expected", [
    ("min_jets=2.5", "min_jets is a count threshold: expected an integer, got 2.5"),
    ("min_jets=1000", "min_jets is a count threshold: expected 0 <= min_jets <= 6 (the count "
                      "states are sized for max(init, upper bound) = 6), got 1000"),
    ("min_jets=-1", "min_jets is a count threshold: expected 0 <= min_jets <= 6"),
])
def test_set_count_parameter(config_path, tmp_path, capsys, item, expected):
    line = _fails(["evaluate", str(config_path), "-o", str(tmp_path / "o"), "--set", item,
                   "--quiet"], capsys)
    assert line.startswith(f"diffcoffea: error: --set {item!r}: {expected}")


@pytest.mark.parametrize("spec, expected", [
    ("min_jets=1:12:4", "the point min_jets = 4.66667: min_jets is a count threshold: "
                        "expected an integer"),
    ("jet_pt_min=-1e308:1e308:3", "the point jet_pt_min = nan: expected a finite number"),
])
def test_grid_points_are_checked(config_path, tmp_path, capsys, spec, expected):
    line = _fails(["scan", str(config_path), "-o", str(tmp_path / "o"), "--grid", spec],
                  capsys)
    assert line.startswith(f"diffcoffea: error: --grid {spec!r}: {expected}")


def test_value_problem_is_the_configs_rule(tmp_path):
    config = H.make_config(tmp_path)
    assert value_problem(config, "min_jets", 3.0) is None
    assert value_problem(config, "jet_pt_min", 25.5) is None
    assert "expected a finite number" in value_problem(config, "jet_pt_min", float("inf"))
    # a trainable count threshold moves between integers through its width
    cfg = H.config_dict(tmp_path)
    cfg["parameters"]["min_jets"] = {"init": 3, "bounds": [1, 6]}
    cfg["selection"]["events"][0]["width"] = 0.5
    soft = config_from_dict(cfg)
    assert value_problem(soft, "min_jets", 2.5, soft=True) is None
    assert "expected an integer" in value_problem(soft, "min_jets", 2.5)


def test_evaluator_run_refuses_a_fractional_count(small_data):
    """``Evaluator.run({"min_jets": 2.5})`` of a fixed count threshold returned NaN
    statistics on backend auto (a trainable one moves between integers: allowed)."""
    from analysis.driver.runner import Evaluator

    params = {**H.PARAMETERS, "min_jets": {"init": 2, "trainable": False}}  # as ttbar.yaml
    with Evaluator(H.make_config(small_data, parameters=params)) as ev, \
            pytest.raises(InputError) as err:
        ev.run({"min_jets": 2.5})
    assert str(err.value) == ("parameter min_jets is a count threshold: expected an "
                              "integer, got 2.5")


def test_resume_and_overwrite_together(config_path, tmp_path, capsys):
    line = _fails(["optimize", str(config_path), "-o", str(tmp_path / "o"), "--resume",
                   "--overwrite", "--no-plots"], capsys)
    assert line == ("diffcoffea: error: --resume and --overwrite contradict each other "
                    "(continue the checkpoint, or delete it and start over); give one")


# --- testing helpers -----------------------------------------------------------------------


def test_chunk_invariance_on_zero_events():
    """A 0-event chunk: its mean is NaN (undefined) beside values and gradients of 0.0;
    compared as "0.0 vs 0.0 (relative difference nan)" before."""
    from analysis import stats
    from analysis.soft import soft_cut
    from analysis.testing import assert_chunk_invariance

    class Moments:
        def process(self, events):
            return {"x": stats.derive(lambda th: {"x": stats.moments(
                events, weight=soft_cut(events, ">", th["a"], 0.3))}, {"a": 0.3})}

    x = np.linspace(0.0, 1.0, 40)
    assert_chunk_invariance(Moments(), x[:0], splits=(2,))
    assert_chunk_invariance(Moments(), x, splits=(2,))  # and a chunk with events
