"""The ``scores:`` schema: one-line config errors naming the key."""

from __future__ import annotations

import pytest

from analysis.config.loader import config_from_dict
from analysis.errors import ConfigError
from analysis.pipeline.plan import build_plan
from tests.pipeline.test_score_kernel import config


def _error(cfg) -> str:
    with pytest.raises(ConfigError) as err:
        config_from_dict(cfg)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_cut_on_an_unknown_score() -> None:
    cfg = config()
    cfg["objects"]["jets"]["cuts"][1]["var"] = "score.tga"
    msg = _error(cfg)
    assert "objects.jets.cuts.1.var" in msg and "unknown score 'tga'" in msg


def test_event_cut_on_an_object_score() -> None:
    cfg = config()
    cfg["selection"][1]["var"] = "score.tag"
    msg = _error(cfg)
    assert "selection.1.var" in msg and "cut it in objects.jets.cuts" in msg


def test_object_cut_on_an_event_score() -> None:
    cfg = config()
    cfg["objects"]["jets"]["cuts"][1]["var"] = "score.ev"
    assert "not a score of the objects of set 'jets'" in _error(cfg)


def test_observable_of_an_object_score() -> None:
    cfg = config()
    cfg["observables"].append({"name": "s", "x": "score.tag", "stats": ["mean"]})
    assert "observables.3.x" in _error(cfg)


def test_duplicate_name_and_bad_init() -> None:
    cfg = config()
    cfg["scores"][1]["score"] = "tag"
    assert "duplicate score name 'tag'" in _error(cfg)
    cfg = config()
    cfg["scores"][0]["init"] = {"seed": 1, "file": "w.npz"}
    assert "scores.0.init" in _error(cfg)


def test_a_score_in_the_single_collection_form() -> None:
    """The single form is one object set named after its collection: a score of its
    fields is per object of that set, as in the object-set form."""
    cfg = config_from_dict({
        "datasets": {"a": {"files": ["x.root"]}},
        "parameters": {"s_min": {"init": 0.0, "bounds": [-1.0, 1.0]}},
        "scores": [{"score": "s", "mlp": {"inputs": ["Jet.pt", "abs(Jet.eta)"]}}],
        "selection": {"objects": {"collection": "Jet", "cuts": [
            {"var": "score.s", "op": ">", "param": "s_min", "width": 0.1}]}},
        "observables": [{"name": "pt", "x": "Jet.pt", "stats": ["mean"]}],
    })  # fmt: skip
    (spec,) = build_plan(cfg).scores
    assert (spec.set, spec.collection) == ("Jet", "Jet")
