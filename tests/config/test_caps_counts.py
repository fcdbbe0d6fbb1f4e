"""Caps and trainable count thresholds in the object-set config (issue 8).

- ``objects.<set>.max_objects``: schema errors name the key (one line, exit 2); an event
  beyond the cap stops ``diffcoffea evaluate`` with one line naming the file, the
  collection, the entry and the key (nothing truncated); within the cap the results
  are those of the uncapped run.
- A count with a ``param`` threshold gets a smoothed integer step (width default 1.0,
  in the plan's width order); a width on a fixed-value count stays an error.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import uproot

from analysis.cli.parser import main
from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.errors import ConfigError
from analysis.pipeline.plan import build_plan, initial_widths
from tests.conftest import SHARED_DATA, edited, one_line_error, write_config

DY = str(SHARED_DATA / "nano_dy.root")


def base() -> dict[str, Any]:
    return {
        "datasets": {"dy": {"files": [DY], "weight": "genWeight"}},
        "parameters": {
            "lep_pt": {"init": 15.0, "bounds": [5.0, 50.0]},
            "n_lep": {"init": 1, "bounds": [0, 3], "integer": True},
        },
        "objects": {
            "muons": {
                "collection": "Muon",
                "max_objects": 2,
                "cuts": [{"var": "pt", "op": ">", "param": "lep_pt", "width": 3.0}],
            },
            "electrons": {
                "collection": "Electron",
                "cuts": [{"var": "pt", "op": ">", "param": "lep_pt", "width": 3.0}],
            },
            "tight": {
                "from": "muons",
                "cuts": [{"var": "pfRelIso04_all", "op": "<", "value": 0.15, "width": 0.05}],
            },
        },
        "selection": [{"count": ["muons", "electrons"], "op": ">=", "param": "n_lep"}],
        "observables": [{"name": "lead", "x": "muons[0].pt", "stats": ["mean"]}],
    }


def edit(path: str, value: Any) -> dict[str, Any]:
    return edited(base(), path, value)


CASES = [
    (
        "cap on a derived set",
        edit("objects/tight/max_objects", 2),
        "objects.tight.max_objects: caps a collection: set it on the root set of 'muons'",
    ),
    (
        "cap of zero",
        edit("objects/muons/max_objects", 0),
        "objects.muons.max_objects: must be >= 1, got 0",
    ),
    (
        "cap not an integer",
        edit("objects/muons/max_objects", "many"),
        "objects.muons.max_objects: expected an integer, got 'many'",
    ),
    (
        "width on a fixed count",
        edit("selection/0", {"count": "muons", "op": ">=", "value": 1, "width": 0.5}),
        "selection.0.width: a count condition is a hard integer condition; a width only smooths",
    ),
    (
        "negative count width",
        edit("selection/0", {"count": "muons", "op": ">=", "param": "n_lep", "width": -1.0}),
        "selection.0.width",
    ),
]


@pytest.mark.parametrize("what,cfg,message", CASES, ids=[c[0] for c in CASES])
def test_cap_and_count_width_errors_name_the_key(what, cfg, message) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg, source="c.yaml")
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"c.yaml: {message}"), text


def test_plan_holds_caps_and_count_widths() -> None:
    cfg = config_from_dict(base())
    sp = build_plan(cfg).sets
    assert sp.caps == {"Muon": 2} and sp.cap_keys == {"Muon": "objects.muons.max_objects"}
    # object cut widths (muons, electrons, tight), then the trainable count's step
    assert initial_widths(cfg) == [3.0, 3.0, 0.05, 1.0]
    assert sp.count_widths == (3,)
    assert [c.cap for c in sp.model.counts] == [3]  # >= n_lep, upper bound 3
    given = edit(
        "selection/0",
        {"count": ["muons", "electrons"], "op": ">=", "param": "n_lep", "width": 0.25},
    )
    assert initial_widths(config_from_dict(given))[-1] == 0.25


def test_event_beyond_max_objects_exits_2_with_one_line(tmp_path, capsys) -> None:
    n_muon = uproot.open(DY)["Events"]["nMuon"].array(library="np")
    first = int(np.argmax(n_muon))
    assert n_muon.max() == 2  # the file's largest muon multiplicity
    cfg = edit("objects/muons/max_objects", 1)
    path = write_config(tmp_path / "c.yaml", cfg)
    assert main(["evaluate", str(path), "--quiet", "-o", str(tmp_path / "out")]) == 2
    message = one_line_error(capsys.readouterr().err)
    assert "nano_dy.root, entries 0-40 (datasets.dy): " in message, message
    assert message.endswith(
        f"collection 'Muon': event {first} has 2 objects, more than "
        "max_objects=1; raise objects.muons.max_objects"
    ), message


@pytest.mark.slow  # two compilations (~15 s on a loaded 2-core machine)
def test_within_the_cap_results_are_the_uncapped_ones() -> None:
    capped = Evaluator(config_from_dict(base())).run(order=1)["dy"]
    free = copy.deepcopy(base())
    del free["objects"]["muons"]["max_objects"]
    uncapped = Evaluator(config_from_dict(free)).run(order=1)["dy"]
    a, b = capped.derived.value, uncapped.derived.value
    assert float(a["selected_sumw"]) == float(b["selected_sumw"])
    ma, mb = a["observables"]["lead"]["moments"], b["observables"]["lead"]["moments"]
    assert float(ma.sumw) == float(mb.sumw) and float(ma.m2) == float(mb.m2)
    np.testing.assert_array_equal(
        capped.taylor()[1]["selected_sumw"], uncapped.taylor()[1]["selected_sumw"]
    )


def test_max_objects_lifts_the_candidate_bound() -> None:
    """31 jets: 4495 trijet candidates exceed the default bound of 4096 (one-line
    ObjectCapError naming the observable); with ``max_objects`` on the jets the same
    chunk runs, and its trijet weights add up to P(>= 3 jets pass)."""
    import jax.numpy as jnp

    from analysis.pipeline.backends.jax.setkernel import chunk_states
    from analysis.pipeline.layout import ChunkColumns, pad_columns
    from analysis.select.objects import ObjectCapError
    def run(cap):
        jets = {
            "collection": "Jet",
            "cuts": [{"var": "pt", "op": ">", "value": 30.0, "width": 5.0}],
        }
        if cap is not None:
            jets["max_objects"] = cap
        cfg = config_from_dict(
            {
                "datasets": {"d": {"files": ["x.root"]}},
                "objects": {"jets": jets},
                "selection": [{"count": "jets", "op": ">=", "value": 0}],
                "observables": [
                    {"name": "m3j", "x": "mass(jets[0] + jets[1] + jets[2])", "stats": ["mean"]}
                ],
            }
        )
        plan = build_plan(cfg)
        rng = np.random.default_rng(31)
        flat = {
            "pt": rng.uniform(20, 60, 31),
            "eta": rng.uniform(-2, 2, 31),
            "phi": rng.uniform(-3, 3, 31),
            "mass": rng.uniform(1, 10, 31),
        }
        cols = ChunkColumns(
            n_events=1, weight=np.ones(1), collections={"Jet": (np.array([31]), flat)}
        )
        arrays, shapes = pad_columns(cols, plan)
        theta = jnp.zeros(len(plan.param_names))
        widths = jnp.asarray(initial_widths(cfg))
        return chunk_states(theta, widths, arrays, plan, shapes), flat

    with pytest.raises(
        ObjectCapError,
        match=r"jets\[0\] \+ jets\[1\] \+ jets\[2\]: 4495 "
        r"candidate tuples per event \(objects that can pass per event "
        r"Jet: 31\) exceed max_tuples=4096",
    ):
        run(None)
    state, flat = run(40)
    q = 1 / (1 + np.exp(-(flat["pt"] - 30.0) / 5.0))
    # P(K >= 3) of the Poisson-binomial, by a direct recursion
    dist = np.zeros(32)
    dist[0] = 1.0
    for p in q:
        dist[1:] = dist[1:] * (1 - p) + dist[:-1] * p
        dist[0] *= 1 - p
    np.testing.assert_allclose(
        float(state["observables"]["m3j"]["moments"].sumw), dist[3:].sum(), rtol=1e-10
    )
