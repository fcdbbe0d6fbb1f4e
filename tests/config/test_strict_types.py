"""Booleans are not numbers (issue 21.6): ``init: true`` was taken as 1.0 and
``chunksize: true`` as 1; now one line naming the key. Booleans stay booleans."""

from __future__ import annotations

import pytest

from analysis.config.loader import config_from_dict
from analysis.errors import ConfigError
from tests.conftest import edited

BASE = {
    "datasets": {"d": {"files": ["x.root"]}},
    "parameters": {"a": {"init": 1.0, "bounds": [0.0, 2.0]}},
    "observables": [{"name": "o", "x": "MET.pt", "stats": ["mean"],
                     "hist": {"bins": 10, "range": [0, 1]}}],
}

CASES = [
    ("parameters/a/init", True, "parameters.a.init: expected a number, got true"),
    ("parameters/a/bounds", [False, 2.0], "parameters.a.bounds.0: expected a number, got a boolean"),
    ("executor", {"chunksize": True}, "executor.chunksize: expected a number, got true"),
    ("executor", {"workers": False}, "executor.workers: expected a number, got false"),
    ("lumi", True, "lumi: expected a number, got true"),
    ("observables/0/hist", {"bins": True, "range": [0, 1]},
     "observables.0.hist.bins: expected a number, got true"),
]


@pytest.mark.parametrize("path,value,message", CASES, ids=[c[2].split(":")[0] for c in CASES])
def test_a_boolean_for_a_number_is_one_line(path, value, message) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(edited(BASE, path, value), source="c.yaml")
    assert str(info.value) == f"c.yaml: {message}"


def test_booleans_stay_booleans() -> None:
    cfg = config_from_dict(edited(edited(BASE, "skip_bad_files", True),
                                  "parameters/a/trainable", False))
    assert cfg.skip_bad_files is True and cfg.parameters["a"].trainable is False
    assert config_from_dict(edited(BASE, "parameters/a/init", 1)).parameters["a"].init == 1.0
