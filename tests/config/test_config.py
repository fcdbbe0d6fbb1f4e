"""Tests for analysis.config.loader: the valid example loads, and every error is one clear line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.config.loader import Config, ParameterConfig, config_from_dict, load_config
from analysis.errors import ConfigError, DiffcoffeaError

VALID = """\
datasets:
  ttbar:
    files: [skhep:nanoAOD_2015_CMS_Open_Data_ttbar.root]
    treename: Events
    weight: genWeight
    role: signal
executor: {type: iterative, workers: 2, chunksize: 100000}
parameters:
  jet_pt_min: {init: 30.0, bounds: [15.0, 200.0]}
  jet_abs_eta_max: {init: 2.4, bounds: [0.5, 4.7]}
  min_jets: {init: 2, trainable: false}
selection:
  objects:
    collection: Jet
    cuts:
      - {var: pt, op: ">", param: jet_pt_min, width: 5.0}
      - {var: abs_eta, op: "<", param: jet_abs_eta_max, width: 0.1}
  events:
    - {count: Jet, op: ">=", param: min_jets}
observables:
  - {name: jet_pt, x: Jet.pt, stats: [mean, var, std, skew, kurtosis]}
  - {name: jet_pt_eta, x: Jet.pt, y: Jet.eta, stats: [covar, corr, linear_fit]}
  - {name: ht, x: sum(Jet.pt), stats: [mean, std]}
output: {dir: results/ttbar}
"""


def _write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error_for(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], *, one_line: bool = True
) -> str:
    """Apply ``mutate`` to the valid config, write it, load it; return the one-line error
    (``one_line=False``: the error lines, several mistakes one line each)."""
    data = yaml.safe_load(VALID)
    mutate(data)
    path = _write(tmp_path, yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert "\n" not in msg or not one_line
    assert all(line.startswith(f"{path}: ") for line in msg.splitlines())
    return msg


# ------------------------------------------------------------------ valid config


def test_valid_config_loads_with_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path, VALID)
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    assert cfg.source == str(path)
    assert cfg.base_dir == tmp_path.resolve()
    ds = cfg.datasets["ttbar"]
    assert ds.files == ["skhep:nanoAOD_2015_CMS_Open_Data_ttbar.root"]
    assert (ds.weight, ds.role, ds.xsec, ds.scale) == ("genWeight", "signal", None, None)
    assert (cfg.executor.workers, cfg.executor.retries, cfg.executor.address) == (2, 0, None)
    assert cfg.parameters["min_jets"].trainable is False
    assert cfg.parameters["jet_pt_min"].bounds == (15.0, 200.0)
    # the single-collection form is rewritten into the object set "Jet" and a list
    assert list(cfg.objects) == ["Jet"] and cfg.objects["Jet"].collection == "Jet"
    cut = cfg.objects["Jet"].cuts[1]
    assert (cut.var, cut.op, cut.param, cut.value, cut.width) == ("abs_eta", "<", "jet_abs_eta_max", None, 0.1)
    entry = cfg.selection.entries[0]
    assert entry.sets == ("Jet",) and entry.effective_width() == 1.0
    assert cfg.selection.objects is None and cfg.selection.events == []
    assert [o.name for o in cfg.observables] == ["jet_pt", "jet_pt_eta", "ht"]
    assert cfg.observables[2].x == "sum(Jet.pt)" and cfg.observables[2].y is None
    assert cfg.output.dir == "results/ttbar"
    # defaults
    assert cfg.lumi == 1.0 and cfg.objective is None
    opt = cfg.optimizer
    assert (opt.name, opt.learning_rate, opt.steps, opt.method) == ("adam", 0.05, 60, "first_order")
    assert (opt.tolerance, opt.window, opt.stochastic, opt.seed) == (1e-4, 5, False, 0)
    assert (opt.anneal.final_width_factor, opt.anneal.schedule) == (0.1, "exponential")
    assert opt.schedule is None and opt.chunks_per_step is None


def test_helpers(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, VALID))
    assert cfg.trainable_names() == ["jet_pt_min", "jet_abs_eta_max"]
    assert cfg.initial_params() == {"jet_pt_min": 30.0, "jet_abs_eta_max": 2.4, "min_jets": 2.0}
    assert cfg.bounds_of("jet_abs_eta_max") == (0.5, 4.7)
    assert cfg.bounds_of("min_jets") is None
    assert cfg.resolve_path("data/a.root") == str(tmp_path.resolve() / "data/a.root")
    assert cfg.resolve_path("skhep:x.root") == "skhep:x.root"


def test_config_from_dict_and_single_file_string() -> None:
    data = {"datasets": {"d": {"files": "a.root", "xsec": 831.8}}, "lumi": 2.5}
    cfg = config_from_dict(data, base_dir=Path("/data"))
    assert cfg.datasets["d"].files == ["a.root"]
    assert cfg.base_dir == Path("/data") and cfg.source == "<config>"
    assert cfg.executor.type == "iterative" and cfg.executor.chunksize == 100_000
    assert cfg.parameters == {} and cfg.observables == [] and cfg.selection.objects is None
    with pytest.raises(ConfigError, match=r"^<config>: datasets: missing required key$"):
        config_from_dict({})


def test_objective_terms_load() -> None:
    data = yaml.safe_load(VALID)
    data["objective"] = {
        "terms": [
            {"type": "significance", "sigma_b": 0.1},
            {"type": "target", "stat": "jet_pt.mean", "value": 50.0, "weight": 0.5},
            {"type": "python", "function": "mypkg.objectives:score"},
        ]
    }
    data["optimizer"] = {
        "tolerance": "1e-4",
        "schedule": {"name": "cosine_decay_schedule", "kwargs": {"decay_steps": 10}},
    }
    cfg = config_from_dict(data)
    assert [t.type for t in cfg.objective.terms] == ["significance", "target", "python"]
    assert cfg.optimizer.tolerance == 1e-4
    assert cfg.optimizer.schedule.kwargs == {"decay_steps": 10}


def test_errors_are_diffcoffea_errors() -> None:
    assert issubclass(ConfigError, DiffcoffeaError)
    assert issubclass(ConfigError, Exception)


# ------------------------------------------------------------------ error messages


def _set(*keys: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        node = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return mutate


def _drop(*keys: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        node = data
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]

    return mutate


def _xsec_and_scale(data: dict[str, Any]) -> None:
    data["datasets"]["ttbar"].update(xsec=1.0, scale=2.0)


CUT0 = ("selection", "objects", "cuts", 0)

ERROR_CASES = {
    "unknown top-level key": (
        _set("observable", value=[]),
        "observable: unknown key; did you mean 'observables'?",
    ),
    "unknown nested key": (
        _set("executor", "chunksiz", value=5),
        "executor.chunksiz: unknown key; did you mean 'chunksize'?",
    ),
    "unknown key without close match": (
        _set("executor", "zzz", value=5),
        "executor.zzz: unknown key; allowed keys: type, workers, chunksize, address, retries",
    ),
    "base_dir is not a key": (_set("base_dir", value="/tmp"), "base_dir: unknown key"),
    "wrong type int": (
        _set("executor", "chunksize", value="abc"),
        "executor.chunksize: expected an integer, got 'abc'",
    ),
    "wrong type mapping": (
        _set("selection", "objects", value="Jet"),
        "selection.objects: expected a mapping, got 'Jet'",
    ),
    "bad literal": (
        _set("executor", "type", value="spark"),
        "executor.type: expected one of 'iterative', 'futures', 'dask' or 'parsl', got 'spark'",
    ),
    "workers < 1": (
        _set("executor", "workers", value=0),
        "executor.workers: must be >= 1, got 0",
    ),
    "address without dask": (
        _set("executor", "address", value="tcp://h:8786"),
        "executor.address: only allowed with type: dask",
    ),
    "inverted bounds": (
        _set("parameters", "jet_pt_min", "bounds", value=[200.0, 15.0]),
        "parameters.jet_pt_min.bounds: lower bound 200.0 must be below upper bound 15.0",
    ),
    "bounds not a pair": (
        _set("parameters", "jet_pt_min", "bounds", value=[15.0]),
        "parameters.jet_pt_min.bounds: expected [lower, upper], got [15.0]",
    ),
    "init outside bounds": (
        _set("parameters", "jet_pt_min", "init", value=500.0),
        "parameters.jet_pt_min.init: 500.0 is outside bounds [15.0, 200.0]",
    ),
    "trainable without bounds": (
        _drop("parameters", "jet_pt_min", "bounds"),
        "parameters.jet_pt_min: trainable parameter needs bounds: [lower, upper]",
    ),
    "negative width": (
        _set(*CUT0, "width", value=-1.0),
        "selection.objects.cuts.0.width: must be a number >= 0 or 'auto', got -1.0",
    ),
    "missing files": (
        _drop("datasets", "ttbar", "files"),
        "datasets.ttbar.files: missing required key",
    ),
    "empty file list": (
        _set("datasets", "ttbar", "files", value=[]),
        "datasets.ttbar.files: empty file list",
    ),
    "no datasets": (_set("datasets", value={}), "datasets: must not be empty"),
    "xsec and scale": (
        _xsec_and_scale,
        "datasets.ttbar.scale: give either 'xsec' or 'scale', not both",
    ),
    "unknown parameter with suggestion": (
        _set(*CUT0, "param", value="jet_pt_mn"),
        "selection.objects.cuts.0.param: unknown parameter 'jet_pt_mn'; did you mean 'jet_pt_min'?",
    ),
    "unknown parameter in event cut": (
        _set("selection", "events", 0, "param", value="nope_nope"),
        "selection.events.0.param: unknown parameter 'nope_nope'; defined parameters: "
        "jet_pt_min, jet_abs_eta_max, min_jets",
    ),
    "param and value": (
        _set(*CUT0, "value", value=30.0),
        "selection.objects.cuts.0.value: give either 'param' or 'value', not both",
    ),
    "neither param nor value": (
        _drop(*CUT0, "param"),
        "selection.objects.cuts.0: needs one of 'param' or 'value'",
    ),
    "count and var": (
        _set("selection", "events", 0, "var", value="MET_pt"),
        "selection.events.0.var: give either 'count' or 'var', not both",
    ),
    "count of other collection": (
        _set("selection", "events", 0, "count", value="Muon"),
        "selection.events.0.count: unknown collection 'Muon'; must be the selected collection 'Jet'",
    ),
    "count parameter not integer": (
        _set("parameters", "min_jets", "init", value=2.5),
        "parameters.min_jets.init: used by a count, needs an integer init, got 2.5"),
    "covar without y": (
        _drop("observables", 1, "y"),
        "observables.1.stats: covar, corr, linear_fit need a second expression 'y'",
    ),
    "bad expression syntax": (
        _set("observables", 2, "x", value="sum(Jet.pt"),
        "observables.2.x: invalid expression 'sum(Jet.pt'",
    ),
    "unbalanced closing paren": (
        _set("observables", 0, "x", value="Jet.pt)"),
        "observables.0.x: invalid expression 'Jet.pt)'",
    ),
    "unknown stat": (
        _set("observables", 0, "stats", value=["median"]),
        "observables.0.stats.0: expected one of 'mean'",
    ),
    "duplicate observable": (
        _set("observables", 2, "name", value="jet_pt"),
        "observables.2.name: duplicate observable name 'jet_pt'",
    ),
    "target term missing stat": (
        _set("objective", value={"terms": [{"type": "target", "value": 1.0}]}),
        "objective.terms.0.stat: a target term needs 'stat'",
    ),
    "python term bad function": (
        _set("objective", value={"terms": [{"type": "python", "function": "mymodule.score"}]}),
        "objective.terms.0.function: expected 'pkg.module:func', got 'mymodule.score'",
    ),
    "anneal factor > 1": (
        _set("optimizer", value={"anneal": {"final_width_factor": 2.0}}),
        "optimizer.anneal.final_width_factor: must be <= 1",
    ),
    "lumi not positive": (_set("lumi", value=0), "lumi: must be > 0"),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_error_message(tmp_path: Path, case: str) -> None:
    mutate, expected = ERROR_CASES[case]
    msg = _error_for(tmp_path, mutate)
    assert expected in msg
    assert msg.startswith(f"{tmp_path / 'cfg.yaml'}: {expected.split(':')[0]}:")


def test_several_errors_are_all_reported_one_line_each(tmp_path: Path) -> None:
    def mutate(data: dict[str, Any]) -> None:
        data["executor"].update(workers=0, chunksize="abc", retries=-1)

    lines = _error_for(tmp_path, mutate, one_line=False).splitlines()
    src = str(tmp_path / "cfg.yaml")
    assert len(lines) == 3 and all(line.startswith(f"{src}: executor.") for line in lines)
    assert lines[0] == f"{src}: executor.workers: must be >= 1, got 0"
    assert any("executor.chunksize" in line for line in lines)
    assert any("executor.retries" in line for line in lines)


def test_an_unknown_key_does_not_hide_the_other_mistakes(tmp_path: Path) -> None:
    """A typo in a key (here two: at the top and in the executor) is listed with the
    mistakes beside and below it, in one run (it once stopped its mapping's checks, so
    ``histogram:`` for ``histograms:`` hid every other error of the file)."""
    def mutate(data: dict[str, Any]) -> None:
        data["lumii"] = data.pop("output")
        data["executor"].update(chunksiz=10, workers=0)
        data["selection"]["objects"]["cuts"][0]["width"] = -5.0

    lines = _error_for(tmp_path, mutate, one_line=False).splitlines()
    src = str(tmp_path / "cfg.yaml")
    assert f"{src}: lumii: unknown key; did you mean 'lumi'?" in lines
    assert f"{src}: executor.chunksiz: unknown key; did you mean 'chunksize'?" in lines
    assert f"{src}: executor.workers: must be >= 1, got 0" in lines
    assert any(line.startswith(f"{src}: selection.objects.cuts.0.width:") for line in lines)
    assert len(lines) == 4, lines


def test_many_errors_are_capped(tmp_path: Path) -> None:
    from analysis.config.loader import MAX_ERRORS

    def mutate(data: dict[str, Any]) -> None:
        for i in range(MAX_ERRORS + 5):
            data["parameters"][f"p{i}"] = {"init": "x", "trainable": False}

    lines = _error_for(tmp_path, mutate, one_line=False).splitlines()
    assert len(lines) == MAX_ERRORS + 1
    assert lines[-1].endswith("(and 5 more errors)")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: no such file"


def test_yaml_syntax_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "datasets:\n  a: {files: [x.root}\nlumi: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: line 2, column ")
    assert "invalid YAML" in msg


@pytest.mark.parametrize(
    ("text", "kind"), [("- a\n- b\n", "list"), ("", "an empty file"), ("just a string\n", "str")]
)
def test_top_level_not_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: top level must be a mapping of keys, got {kind}"


def test_defaults_are_not_shared() -> None:
    """Mutating one config's defaults must not leak into another."""
    a = config_from_dict({"datasets": {"d": {"files": ["a.root"]}}})
    a.parameters["p"] = ParameterConfig(init=1.0, trainable=False)
    a.executor.workers = 7
    b = config_from_dict({"datasets": {"d": {"files": ["a.root"]}}})
    assert b.parameters == {} and b.executor.workers == 1
