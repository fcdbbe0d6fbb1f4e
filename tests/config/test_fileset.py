"""``datasets:`` as a coffea fileset (analysis.config.fileset): a JSON path, a
``preprocess`` output, the same mapping inline; remote paths reach uproot as written.

References: the results of the config's own ``datasets:`` layout on the same files
(``evaluate``, every dataset's statistics and gradients equal); coffea's own
``DatasetSpec`` (coffea.dataset_tools.filespec) accepts every fileset written here, so
the layouts are coffea's and not ours.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import uproot
from coffea.dataset_tools.filespec import DatasetSpec

from analysis.cli import main
from analysis.config.loader import load_config
from analysis.driver.files import resolve_fileset
from analysis.errors import DiffcoffeaError
from tests.conftest import one_line_error, write_config
from tests.opt_helpers import config_dict

META = {"ttbar": {"xsec": 831.76, "role": "signal", "weight": "genWeight", "year": 2016},
        "dy": {"xsec": 6077.0, "role": "background", "weight": "genWeight"}}


def files_of(data: Path, ds: str) -> list[Path]:
    return sorted((data / ds).glob("*.root"))


def fileset(data: Path, *, relative_to: Path | None = None, preprocessed: bool = False) -> dict:
    """coffea's fileset of the small datasets (paths relative to ``relative_to``)."""
    out = {}
    for ds in ("ttbar", "dy"):
        files = {}
        for f in files_of(data, ds):
            name = str(f.relative_to(relative_to)) if relative_to else str(f)
            if preprocessed:  # what coffea.dataset_tools.preprocess writes per file
                with uproot.open(f) as r:
                    n, uuid = r["Events"].num_entries, str(r.file.uuid)
                files[name] = {"object_path": "Events", "steps": [[0, n // 2], [n // 2, n]],
                               "num_entries": n, "uuid": uuid}
            else:
                files[name] = "Events"
        out[ds] = {"files": files, "metadata": dict(META[ds])}
        if preprocessed:
            out[ds]["form"] = None
        DatasetSpec.model_validate(out[ds])  # coffea's own schema accepts it
    return out


def evaluate(cfg: dict, where: Path) -> dict:
    path = write_config(where / "config.yaml", cfg)
    out = where / "out"
    assert main(["evaluate", str(path), "-o", str(out), "--quiet"]) == 0
    return json.loads((out / "results.json").read_text())


def comparable(results: dict) -> dict:
    """What must not depend on how the files were listed."""
    return {k: results[k] for k in ("parameters", "widths", "datasets")}


@pytest.fixture(scope="module")
def reference(small_data, tmp_path_factory) -> dict:
    return comparable(evaluate(config_dict(small_data), tmp_path_factory.mktemp("listed")))


@pytest.mark.parametrize("kind", ["fileset", "preprocess"])
def test_fileset_json_equals_the_datasets_layout(small_data, tmp_path, reference, kind) -> None:
    # paths relative to the JSON file, which lies elsewhere than the config
    where = small_data  # the JSON beside the data; the config in tmp_path
    name = f"fileset_{kind}_{tmp_path.name}.json"
    (where / name).write_text(json.dumps(
        fileset(small_data, relative_to=where, preprocessed=kind == "preprocess")))
    cfg = config_dict(small_data)
    cfg["datasets"] = str(where / name)
    assert comparable(evaluate(cfg, tmp_path)) == reference


def test_inline_fileset_equals_the_datasets_layout(small_data, tmp_path, reference) -> None:
    cfg = config_dict(small_data)
    cfg["datasets"] = fileset(small_data)
    assert comparable(evaluate(cfg, tmp_path)) == reference


def test_relative_json_path_and_metadata(small_data, tmp_path) -> None:
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "fs.json").write_text(json.dumps(fileset(small_data)))
    cfg = config_dict(small_data)
    cfg["datasets"] = "sets/fs.json"  # relative to the config file
    config = load_config(write_config(tmp_path / "c.yaml", cfg))
    tt = config.datasets["ttbar"]
    assert (tt.xsec, tt.role, tt.weight, tt.treename) == (831.76, "signal", "genWeight", "Events")
    assert tt.files == [str(f) for f in files_of(small_data, "ttbar")]


def test_remote_paths_reach_uproot_unchanged(small_data, tmp_path, monkeypatch) -> None:
    url = "root://eospublic.cern.ch//eos/opendata/cms/x/nano_1.root"
    https = "https://example.org/data/nano 2.root"
    fs = {"remote": {"files": {url: "Events", https: {"object_path": "Events"}},
                     "metadata": {"role": "signal", "xsec": 1.0}}}
    (tmp_path / "fs.json").write_text(json.dumps(fs))
    cfg = config_dict(small_data)
    cfg["datasets"] = "fs.json"
    config = load_config(write_config(tmp_path / "c.yaml", cfg))
    assert config.datasets["remote"].files == [url, https]
    opened = []

    class Unreachable(OSError):
        pass

    def fake_open(path, *args, **kwargs):
        opened.append(path)
        raise Unreachable("offline")

    monkeypatch.setattr(uproot, "open", fake_open)
    with pytest.raises(DiffcoffeaError, match="not a readable ROOT file"):
        resolve_fileset(config)
    skipped = []
    assert resolve_fileset(config, skipped=skipped)["remote"]["files"] == {}
    assert opened == [url, url, https]
    assert [f.file for f in skipped] == [url, https]


BAD = [
    ("missing.json", None, "datasets: no such file"),
    ("bad.json", "{not json", "bad.json: not a JSON fileset"),
    ("list.json", "[1, 2]", "list.json: expected a fileset"),
    ("nofiles.json", '{"tt": {"metadata": {}}}', "nofiles.json.tt.files: expected a non-empty"),
    ("key.json", '{"tt": {"files": {"a.root": "Events"}, "meta": {}}}', "key.json.tt.meta: unknown key"),
    ("tree.json", '{"tt": {"files": {"a.root": {"steps": []}}}}',
     "tree.json.tt.files.a.root.object_path: expected the tree name"),
    ("trees.json", '{"tt": {"files": {"a.root": "Events", "b.root": "Other"}}}',
     "trees.json.tt.files: the files name different trees"),
    ("role.json", '{"tt": {"files": {"a.root": "Events"}, "metadata": {"role": "sig"}}}',
     "role.json.tt.metadata.role:"),
    ("xsec.json", '{"tt": {"files": {"a.root": "Events"}, "metadata": {"xsec": -1}}}',
     "xsec.json.tt.metadata.xsec:"),
]


@pytest.mark.parametrize(("name", "content", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_fileset_is_one_line_naming_file_and_key(small_data, tmp_path, capsys, name,
                                                     content, expected) -> None:
    if content is not None:
        (tmp_path / name).write_text(content)
    cfg = config_dict(small_data)
    cfg["datasets"] = name
    path = write_config(tmp_path / "c.yaml", cfg)
    assert main(["evaluate", str(path), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert expected in line, line
    assert name in line
