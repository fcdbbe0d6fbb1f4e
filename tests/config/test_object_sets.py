"""The object-set form of the config (``objects:``, a ``selection`` list, indexed and
4-vector observables): every new key's error is one line naming the key, exit 2."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.cli.parser import main
from analysis.config.loader import config_from_dict
from analysis.errors import ConfigError
from analysis.pipeline.plan import build_plan, initial_widths
from tests.conftest import SHARED_DATA, edited, one_line_error, write_config


def base() -> dict[str, Any]:
    return {
        "datasets": {"dy": {"files": [str(SHARED_DATA / "nano_dy.root")]}},
        "parameters": {
            "pt_min": {"init": 20.0, "bounds": [5.0, 50.0]},
            "n_min": {"init": 2, "bounds": [0, 4], "integer": True},
        },
        "objects": {
            "jets": {
                "collection": "Jet",
                "cuts": [{"var": "pt", "op": ">", "param": "pt_min", "width": 5.0}],
            },
            "bjets": {"from": "jets", "cuts": [{"var": "btagDeepFlavB", "op": ">", "value": 0.5}]},
            "muons": {"collection": "Muon", "rank_by": "pt"},
        },
        "selection": [
            {"count": "jets", "op": ">=", "param": "n_min"},
            {"count": ["muons", "bjets"], "op": "==", "value": 1},
            {"var": "MET.pt", "op": ">", "value": 10.0, "width": 2.0},
        ],
        "observables": [
            {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean"]},
            {"name": "mjj", "x": "mass(jets[0] + jets[1])", "stats": ["mean"]},
            {"name": "dr", "x": "deltaR(jets[0], muons[0])", "stats": ["mean"]},
            {"name": "pteta", "x": "jets.pt", "y": "jets.eta", "stats": ["corr"]},
            {"name": "lead", "x": "jets[0].pt", "stats": ["mean"]},
        ],
    }


def edit(path: str, value: Any) -> dict[str, Any]:
    return edited(base(), path, value)


def test_valid_object_set_config_builds_a_plan() -> None:
    cfg = config_from_dict(base())
    plan = build_plan(cfg)
    assert plan.sets is not None
    assert [s.name for s in plan.sets.sets] == ["jets", "bjets", "muons"]
    assert dict(plan.sets.fields)["Jet"][:2] == ("pt", "btagDeepFlavB")
    # count caps: >= n_min (upper bound 4) -> 4; == 1 -> 2
    assert [c.cap for c in plan.sets.model.counts] == [4, 2]
    assert plan.event_keys == ("MET.pt",)
    # object cuts, then entries: the trainable count's integer step (default 1.0), MET
    assert initial_widths(cfg) == [5.0, 0.0, 1.0, 2.0]
    assert plan.sets.count_widths == (2, None)
    assert len(initial_widths(cfg)) == plan.n_widths


CASES = [
    (
        "unknown set in a count",
        edit("selection/0", {"count": "jetz", "op": ">=", "value": 2}),
        "selection.0.count: unknown set 'jetz'; did you mean 'jets'?",
    ),
    (
        "unknown set in a count list",
        edit("selection/1", {"count": ["muons", "taus"], "op": "==", "value": 1}),
        "selection.1.count: unknown set 'taus'",
    ),
    (
        "unknown parent",
        edit("objects/bjets", {"from": "jet"}),
        "objects.bjets.from: unknown set 'jet'",
    ),
    (
        "cycle in from",
        edit("objects/jets", {"from": "bjets"}),
        "objects.jets.from: cycle in 'from' via 'jets'",
    ),
    (
        "collection and from",
        edit("objects/bjets", {"from": "jets", "collection": "Jet"}),
        "objects.bjets.from: give either 'collection' or 'from', not both",
    ),
    (
        "unknown key of a set",
        edit("objects/muons", {"collection": "Muon", "cutz": []}),
        "objects.muons.cutz: unknown key; did you mean 'cuts'?",
    ),
    (
        "unknown function",
        edit("observables/1/x", "massx(jets[0] + jets[1])"),
        "observables.1.x: unknown function 'massx'",
    ),
    (
        "unknown set in an observable",
        edit("observables/1/x", "mass(jets[0] + taus[0])"),
        "observables.1.x: unknown object set 'taus'",
    ),
    (
        "unknown set in sum",
        edit("observables/0/x", "sum(taus.pt)"),
        "observables.0.x: unknown object set 'taus'",
    ),
    (
        "bad indexed argument",
        edit("observables/2/x", "deltaR(jets[0], muons)"),
        "observables.2.x: in 'deltaR(jets[0], muons)': expected an indexed object",
    ),
    (
        "y of another set",
        edit("observables/3/y", "muons.eta"),
        "observables.3.y: 'muons.eta' does not pair with x",
    ),
    (
        "unknown parameter of a set cut",
        edit(
            "objects/muons",
            {"collection": "Muon", "cuts": [{"var": "pt", "op": ">", "param": "mu_pt"}]},
        ),
        "objects.muons.cuts.0.param: unknown parameter 'mu_pt'",
    ),
    (
        "count with a width",
        edit("selection/0", {"count": "jets", "op": ">=", "value": 2, "width": 1.0}),
        "selection.0.width: a count condition is a hard integer condition",
    ),
    (
        "count param without integer init",
        edit("parameters/n_min", {"init": 2.5, "bounds": [0, 4]}),
        "parameters.n_min: used by a count, needs an integer init",
    ),
    (
        "== on a var cut",
        edit("selection/2", {"var": "MET.pt", "op": "==", "value": 1.0}),
        "selection.2.op: '==' is only for counts",
    ),
    (
        "var cut on a set",
        edit("selection/2", {"var": "jets.pt", "op": ">", "value": 1.0}),
        "selection.2.var: expected a per-event branch",
    ),
]


@pytest.mark.parametrize("what,cfg,message", CASES, ids=[c[0] for c in CASES])
def test_object_set_config_errors_name_the_key(what, cfg, message) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg, source="c.yaml")
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"c.yaml: {message}"), text


def test_object_set_config_error_exits_2_with_one_line(tmp_path, capsys) -> None:
    path = write_config(tmp_path / "c.yaml", CASES[3][1])
    assert main(["evaluate", str(path), "--quiet", "-o", str(tmp_path / "out")]) == 2
    message = one_line_error(capsys.readouterr().err)
    assert "objects.jets.from: cycle in 'from'" in message


def test_unknown_field_of_a_collection_exits_2_with_one_line(tmp_path, capsys) -> None:
    cfg = edit(
        "objects/bjets",
        {"from": "jets", "cuts": [{"var": "btagDeepFlavZ", "op": ">", "value": 0.5}]},
    )
    path = write_config(tmp_path / "c.yaml", cfg)
    assert main(["evaluate", str(path), "--quiet", "-o", str(tmp_path / "out")]) == 2
    message = one_line_error(capsys.readouterr().err)
    assert "nano_dy.root: no field of Jet 'btagDeepFlavZ'; did you mean" in message


def test_old_single_collection_form_is_unchanged() -> None:
    cfg = config_from_dict(
        {
            "datasets": {"d": {"files": ["x.root"]}},
            "selection": {
                "objects": {"collection": "Jet", "cuts": []},
                "events": [{"count": "Jet", "op": ">=", "value": 2}],
            },
            "observables": [{"name": "n", "x": "count(Jet)", "stats": ["mean"]}],
        }
    )
    assert build_plan(cfg).sets is None


def test_nonfinite_object_values_error_or_drop_whole_events() -> None:
    import numpy as np

    from analysis.data.columns import _finite
    from analysis.errors import InputError
    from analysis.pipeline.layout import ChunkColumns

    pt = np.array([10.0, np.nan, 5.0, 7.0])
    cols = ChunkColumns(
        n_events=3,
        weight=np.ones(3),
        events={"MET.pt": np.array([1.0, 2.0, 3.0])},
        collections={"Jet": (np.array([1, 2, 1]), {"pt": pt})},
    )
    with pytest.raises(
        InputError,
        match=r"f.root: branch 'Jet_pt' has a non-finite value at "
        r"entry 11",
    ):
        _finite(cols, None, weight_branch=None, policy="error", source="f.root", offset=10)
    # outside a guarded chunk note_dropped records nothing (faults tests cover recording)
    out = _finite(cols, None, weight_branch=None, policy="drop", source="f.root", offset=0)
    assert out.n_events == 2
    counts, flat = out.collections["Jet"]
    assert counts.tolist() == [1, 1]
    assert flat["pt"].tolist() == [10.0, 7.0]
    assert out.events["MET.pt"].tolist() == [1.0, 3.0]
