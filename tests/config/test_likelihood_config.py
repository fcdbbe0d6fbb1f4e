"""The YAML of histograms, systematics and the likelihood (issue 17): what is accepted,
and one line naming the key for each kind of mistake."""

from __future__ import annotations

import copy

import pytest

from analysis.config.likelihood import build_model, parse_factor
from analysis.config.loader import config_from_dict
from analysis.errors import ConfigError
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.pipeline.results import width_labels


def base() -> dict:
    return {
        "datasets": {"sig": {"files": ["a.root"], "role": "signal"},
                     "bkg": {"files": ["b.root"], "role": "background"},
                     "data": {"files": ["c.root"], "role": "data"}},
        "parameters": {"pt": {"init": 30.0, "bounds": [10.0, 90.0]},
                       "nb": {"init": 1, "bounds": [0, 3], "integer": True}},
        "objects": {"jets": {"collection": "Jet",
                             "cuts": [{"var": "pt", "op": ">", "param": "pt", "width": 5.0}]},
                    "bjets": {"from": "jets", "cuts": [
                        {"var": "btagDeepFlavB", "op": ">", "value": 0.3, "width": 0.05}]}},
        "selection": [{"count": "jets", "op": ">=", "value": 2}],
        "histograms": [{"name": "ht", "x": "sum(jets.pt)", "edges": [100, 200, 300, 450, 700]},
                       {"name": "lead", "x": "jets[0].pt", "bins": {"n": 4, "lo": 0, "hi": 200}}],
        "systematics": [
            {"name": "jes", "type": "shift", "field": "Jet.pt", "up": 1.03, "down": 0.97},
            {"name": "ps", "type": "weight", "up": "PSWeight[0]", "down": "PSWeight[2] * 0.5"},
            {"name": "bkg_norm", "type": "lnN", "datasets": ["bkg"], "kappa": 1.10},
        ],
        "likelihood": {"channels": {
            "sr": {"histogram": "ht"},
            "cr": {"histogram": "lead",
                   "selection": [{"count": "bjets", "op": ">=", "param": "nb", "width": 0.5},
                                 {"var": "MET.pt", "op": ">", "value": 20.0, "width": 2.0}]},
        }, "mc_stat": True},
        "objective": {"terms": [{"type": "discovery_significance"}]},
    }


def test_the_contract_names_load_into_a_model_and_a_plan() -> None:
    cfg = config_from_dict(base())
    model = build_model(cfg)
    assert [c.name for c in model.channels] == ["sr", "cr"]
    assert model.signal == ("sig",) and model.mc_stat
    assert model.shape_names == ("jes", "ps")
    assert [(n.name, n.datasets, n.kappa) for n in model.normalisations] == [
        ("bkg_norm", ("bkg",), 1.1)]
    assert set(model.channels[0].datasets) == {"sig", "bkg"}  # not the data dataset
    assert cfg.histograms[1].bin_edges() == (0.0, 50.0, 100.0, 150.0, 200.0)
    plan = build_plan(cfg)
    keys = {h.key for h in plan.hists}
    assert {"ht", "lead", "sr", "cr", "sr:jes:up", "cr:ps:down"} <= keys
    assert len(plan.regions) == 1  # the cr channel's own selection
    # the channel's param count (width 0.5) and MET cut (width 2.0) widths come last
    assert initial_widths(cfg)[-2:] == [0.5, 2.0] and plan.n_widths == len(initial_widths(cfg))
    # results.json keys the widths by label: the channel's two are named, not dropped
    labels = width_labels(cfg)
    assert len(labels) == plan.n_widths
    assert labels[-2:] == ["cr: count(bjets) >= nb", "cr: MET.pt > 20"]
    assert {"PSWeight[0]", "PSWeight[2]", "MET.pt"} <= set(plan.event_keys)


def test_factor_expressions() -> None:
    assert parse_factor("PS_up") == ("branch", "PS_up")
    assert parse_factor("0.5 * (LHEScaleWeight[0] + LHEScaleWeight[8])") == (
        "*", ("num", 0.5), ("+", ("branch", "LHEScaleWeight[0]"), ("branch", "LHEScaleWeight[8]")))
    assert parse_factor("-MET.pt / 2") == ("/", ("neg", ("branch", "MET.pt")), ("num", 2.0))
    for bad in ("exp(x)", "x[y]", "x ** 2", "x[-1]", "1 +"):
        with pytest.raises(ValueError):
            parse_factor(bad)


def _edit(path: str, value) -> dict:
    cfg = copy.deepcopy(base())
    *head, last = path.split("/")
    node = cfg
    for k in head:
        node = node[int(k)] if isinstance(node, list) else node[k]
    if value is KeyError:
        del node[int(last) if isinstance(node, list) else last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return cfg


BAD = {
    "edges not increasing": ("histograms/0/edges", [100, 300, 200],
                             "histograms.0.edges", "strictly increasing"),
    "edges and bins": ("histograms/1/edges", [0, 1], "histograms.1.edges", "exactly one"),
    "unknown set in x": ("histograms/0/x", "sum(jest.pt)", "histograms.0.x", "jest"),
    "bins lo >= hi": ("histograms/1/bins", {"n": 4, "lo": 5, "hi": 1}, "histograms.1.bins", "lo < hi"),
    "unknown histogram": ("likelihood/channels/sr/histogram", "htt",
                          "likelihood.channels.sr.histogram", "htt"),
    "channel without signal": ("likelihood/channels/sr/datasets", ["bkg"],
                               "likelihood.channels.sr", "no signal dataset"),
    "data dataset in a channel": ("likelihood/channels/sr/datasets", ["sig", "data"],
                                  "likelihood.channels.sr.datasets.1", "not a signal or background"),
    "unknown lnN dataset": ("systematics/2/datasets", ["bkgg"], "systematics.2.datasets.0", "bkgg"),
    "kappa <= 0": ("systematics/2/kappa", 0.0, "systematics.2.lnN.kappa", "> 0"),
    "shift names a set": ("systematics/0/field", "jets.pt", "systematics.0.field", "collection"),
    "bad factor": ("systematics/1/up", "exp(PSWeight[0])", "systematics.1.weight.up", "exp"),
    "unknown type": ("systematics/1/type", "shape", "systematics.1", "shape"),
    "unknown channel key": ("likelihood/channels/sr/hist", "ht", "likelihood.channels.sr.hist", "hist"),
    "unknown channel param": ("likelihood/channels/cr/selection/0/param", "nbb",
                              "likelihood.channels.cr.selection.0.param", "nbb"),
    "likelihood without histograms": ("histograms", [], "likelihood", "histograms"),
    "systematics without likelihood": ("likelihood", KeyError, "systematics", "likelihood"),
    "term without likelihood": None,
}


@pytest.mark.parametrize("case", sorted(k for k, v in BAD.items() if v))
def test_bad_sections_are_one_line_naming_the_key(case: str) -> None:
    path, value, key, words = BAD[case]
    with pytest.raises(ConfigError) as err:
        config_from_dict(_edit(path, value))
    msg = str(err.value)
    assert "\n" not in msg and key in msg and words in msg, msg


def test_a_likelihood_term_without_a_likelihood_is_one_line() -> None:
    from analysis.optimize.objectives import Objective

    cfg = _edit("likelihood", KeyError)
    cfg["systematics"] = []
    config = config_from_dict(cfg)
    with pytest.raises(ConfigError) as err:
        Objective(config, build_plan(config))
    msg = str(err.value)
    assert "\n" not in msg and "objective.terms.0" in msg and "likelihood:" in msg, msg


def test_a_shift_of_a_field_nothing_reads_is_refused() -> None:
    cfg = _edit("systematics/0/field", "Jet.mass")
    with pytest.raises(ConfigError) as err:
        build_plan(config_from_dict(cfg))
    msg = str(err.value)
    assert "systematics.0.field" in msg and "changes nothing" in msg and "\n" not in msg


def test_the_cls_upper_limit_term_loads_and_a_bad_level_is_one_line() -> None:
    from analysis.config.terms import ClsUpperLimitTerm

    cfg = _edit("objective/terms", [{"type": "cls_upper_limit", "level": 0.05}])
    term = config_from_dict(cfg).objective.terms[0]
    assert isinstance(term, ClsUpperLimitTerm) and term.level == 0.05
    for bad in (0.0, 1.0, 1.5, "five"):
        with pytest.raises(ConfigError) as err:
            config_from_dict(_edit("objective/terms", [{"type": "cls_upper_limit", "level": bad}]))
        msg = str(err.value)
        assert "\n" not in msg and "objective.terms.0" in msg and "level" in msg, msg


def test_the_limit_is_asked_for_by_a_term_or_the_likelihood_section() -> None:
    """results.json's ``upper_limit`` is computed at the term's level, at 0.05 with
    ``likelihood: {upper_limit: true}``, else not at all (None)."""
    from analysis.optimize.lksection import limit_level

    assert limit_level(config_from_dict(base())) is None
    cfg = base()
    cfg["likelihood"]["upper_limit"] = True
    assert limit_level(config_from_dict(cfg)) == 0.05
    cfg = _edit("objective/terms", [{"type": "cls_upper_limit", "level": 0.1}])
    assert limit_level(config_from_dict(cfg)) == 0.1
