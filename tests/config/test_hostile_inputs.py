"""Filesets, parsl configs and generated datasets under hostile conditions (issue 54, item 4).

Every file read whole is a regular file of bounded size (a FIFO, ``/dev/zero`` or a
directory: one line, at once); a key given twice in a JSON object is refused (as in
YAML); a deeply nested JSON is one line; a file literally named ``tt[1].root`` is read,
never globbed into ``tt1.root``; a flat (not jagged) ``Jet_pt`` names the file and the
field; parsl's run directory honours ``XDG_CACHE_HOME`` and survives an unwritable HOME."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.config.loader import ConfigError, config_from_dict
from analysis.errors import InputError
from analysis.jsonsafe import parse_json

FILESET = {"tt": {"files": {"a.root": "Events"}, "metadata": {"xsec": 1.0}}}


def _load_fileset(tmp_path: Path, name: str = "fileset.json") -> str:
    with pytest.raises(ConfigError) as err:
        config_from_dict({"datasets": name}, base_dir=tmp_path)
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


def test_fileset_fifo_dev_zero_directory(tmp_path):
    os.mkfifo(tmp_path / "fileset.json")
    assert "JSON fileset is a FIFO; expected a regular file" in _load_fileset(tmp_path)
    os.unlink(tmp_path / "fileset.json")
    (tmp_path / "fileset.json").symlink_to("/dev/zero")
    assert "JSON fileset is a device; expected a regular file" in _load_fileset(tmp_path)
    os.unlink(tmp_path / "fileset.json")
    (tmp_path / "fileset.json").mkdir()
    assert "JSON fileset is a directory; expected a regular file" in _load_fileset(tmp_path)


def test_fileset_duplicate_dataset_key(tmp_path):
    """Two ``tt`` entries: ``json.loads`` kept the second silently."""
    (tmp_path / "fileset.json").write_text(
        '{"tt": {"files": {"a.root": "Events"}}, "tt": {"files": {"b.root": "Events"}}}')
    assert "fileset.json: not a JSON fileset (duplicate key 'tt'; each key once)" in \
        _load_fileset(tmp_path)
    (tmp_path / "fileset.json").write_text(json.dumps(FILESET))
    assert config_from_dict({"datasets": "fileset.json"}, base_dir=tmp_path).datasets["tt"]


def test_fileset_nested_deeply_is_one_line(tmp_path):
    (tmp_path / "fileset.json").write_text("[" * 200_000 + "]" * 200_000)
    assert "not a JSON fileset (JSON nested too deeply)" in _load_fileset(tmp_path)


def test_parse_json_refuses_duplicates_at_any_depth():
    with pytest.raises(ConfigError, match=r"x: not a JSON document \(duplicate key 'b'"):
        parse_json('{"a": [{"b": 1, "b": 2}]}', "x")
    assert parse_json('{"a": [{"b": 1}, {"b": 2}]}', "x") == {"a": [{"b": 1}, {"b": 2}]}


# --- parsl ---------------------------------------------------------------------------------


def test_parsl_config_must_be_a_regular_file(tmp_path):
    pytest.importorskip("parsl")
    from analysis.driver.executors import _user_parsl_config

    os.mkfifo(tmp_path / "fifo.py")
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    marker = tmp_path / "ran"
    (pkg / "__main__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    for name, kind in (("fifo.py", "a FIFO"), ("zero.py", "a device"), ("pkg", "a directory")):
        with pytest.raises(ConfigError) as err:
            _user_parsl_config(str(tmp_path / name))
        assert str(err.value) == (f"{tmp_path / name}: executor.parsl_config (a Python file) is "
                                  f"{kind}; expected a regular file")
    assert not marker.exists()  # the directory's __main__.py never ran


def test_parsl_run_dir_honours_xdg_and_survives_a_bad_home(tmp_path, monkeypatch):
    from analysis.driver.executors import parsl_run_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert parsl_run_dir() == str(tmp_path / "xdg" / "diffcoffea" / "parsl")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "/proc/no-such-home")  # cannot be created, even by root
    where = parsl_run_dir()
    assert not where.startswith("/proc") and os.path.isdir(where)


# --- files ---------------------------------------------------------------------------------


def test_literal_bracket_file_is_not_globbed(small_data, tmp_path):
    """``tt[1].root`` beside ``tt1.root``: the pattern would match only ``tt1.root``."""
    from analysis.driver.files import resolve_fileset

    src = sorted((small_data / "ttbar").glob("*.root"))
    shutil.copy(src[0], tmp_path / "tt[1].root")
    shutil.copy(src[1] if len(src) > 1 else src[0], tmp_path / "tt1.root")
    cfg = config_from_dict({"datasets": {"tt": {"files": ["tt[1].root"]}}}, base_dir=tmp_path)
    assert list(resolve_fileset(cfg)["tt"]["files"]) == [str(tmp_path / "tt[1].root")]
    # a pattern that is no file is still a pattern
    cfg = config_from_dict({"datasets": {"tt": {"files": ["tt[1x].root"]}}}, base_dir=tmp_path)
    assert list(resolve_fileset(cfg)["tt"]["files"]) == [str(tmp_path / "tt1.root")]


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_generated_manifest_must_be_a_regular_file(tmp_path, kind):
    from analysis.data.generate import ensure_dataset, manifest_path

    mpath = manifest_path(tmp_path, "dy")
    {"fifo": lambda: os.mkfifo(mpath), "dev_zero": lambda: mpath.symlink_to("/dev/zero"),
     "directory": lambda: mpath.mkdir()}[kind]()
    with pytest.raises(InputError) as err:
        ensure_dataset(tmp_path, process="dy", n_events=10)
    assert str(err.value).startswith(f"{mpath}: generated dataset's manifest is ")
    assert "\n" not in str(err.value)


def test_damaged_manifest_is_rewritten(tmp_path):
    from analysis.data.generate import ensure_dataset, manifest_path

    ensure_dataset(tmp_path, process="dy", n_events=10)
    manifest_path(tmp_path, "dy").write_text('{"process": "dy", "process": "tt"}')
    ensure_dataset(tmp_path, process="dy", n_events=10)
    assert json.loads(manifest_path(tmp_path, "dy").read_text())["process"] == "dy"


def test_flat_jet_pt_names_file_and_field(tmp_path):
    """An RNTuple (uproot's default) whose ``Jet_pt`` is one value per event: was
    ``KeyError: missing key 'content'`` from coffea."""
    import awkward as ak
    import uproot

    from analysis.data.branches import branch_problem

    n = 4
    columns = {"nJet": np.full(n, 1, np.int32), "Jet_eta": ak.Array([[0.0]] * n),
               "Jet_phi": ak.Array([[0.0]] * n), "Jet_mass": ak.Array([[0.0]] * n)}
    with uproot.recreate(tmp_path / "flat.root") as f:
        f["Events"] = {**columns, "Jet_pt": np.ones(n)}
    with uproot.recreate(tmp_path / "jagged.root") as f:
        f["Events"] = {**columns, "Jet_pt": ak.Array([[1.0]] * n)}
    with uproot.open(tmp_path / "flat.root") as f:
        assert f["Events"].classname == "ROOT::RNTuple"
        assert branch_problem(f["Events"], {"Jet": ("pt",)}) == (
            "field 'Jet_pt' is a flat field (double: one value per event), not one value per "
            "Jet object (std::vector)")
    with uproot.open(tmp_path / "jagged.root") as f:
        assert branch_problem(f["Events"], {"Jet": ("pt",)}) is None
