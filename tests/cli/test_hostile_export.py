"""``diffcoffea export`` of a broken or planted results folder (issue 54, item 3).

results.json is untrusted input: a FIFO or ``/dev/zero`` is refused at once, a key given
twice is refused, and a tampered ``likelihood`` section (descending or NaN edges,
missing keys, kappa <= 0, wrong lengths, strings for numbers, an empty sample list, a
signal given as a string, names that would become paths) is one line per problem before
anything is written; nothing partial is left behind. Reference: a hand-written valid
section, exported and loaded by pyhf."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pyhf
import pytest

from analysis.cli import export as E
from analysis.cli.parser import main
from analysis.errors import DiffcoffeaError
from tests.conftest import ERROR_PREFIX, one_line_error

FILES = (E.WORKSPACE, E.SHAPES, E.DATACARD)


def _sample(sumw, up, down):
    return {"nominal": {"sumw": sumw, "sumw2": [0.1 * w for w in sumw]},
            "variations": {"jes": {"up": up, "down": down}}}


SECTION = {
    "channels": {"sr": {"edges": [0.0, 1.0, 2.0, 3.0], "samples": {
        "sig": _sample([2.0, 3.0, 1.0], [2.2, 3.3, 1.1], [1.8, 2.7, 0.9]),
        "bkg": _sample([10.0, 8.0, 5.0], [10.5, 8.4, 5.2], [9.5, 7.6, 4.8])}}},
    "normalisations": {"bkg_norm": {"datasets": ["bkg"], "kappa": 1.1}},
    "signal": ["sig"],
    "mc_stat": True,
    "floor": 1e-9,
    "significance": {"value": 1.0, "grad": {}, "reliable": True},
}


def _export(tmp_path: Path, section, capsys) -> tuple[int, str]:
    (tmp_path / "results.json").write_text(json.dumps({"likelihood": section}))
    capsys.readouterr()
    rc = main(["export", str(tmp_path), "--quiet"])
    return rc, capsys.readouterr().err


def test_valid_section_exports(tmp_path, capsys):
    rc, err = _export(tmp_path, SECTION, capsys)
    assert rc == 0, err
    pyhf.Workspace(json.loads((tmp_path / E.WORKSPACE).read_text()))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".export-")]


def _tampered(path: str, value):
    sec = copy.deepcopy(SECTION)
    *keys, last = path.split(".")
    node = sec
    for k in keys:
        node = node[int(k)] if isinstance(node, list) else node[k]
    if value is KeyError:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return sec


S = "channels.sr.samples"
CASES = [
    ("channels.sr.edges", [0.0, 2.0, 1.0, 3.0], "channels.sr.edges: expected strictly increasing"),
    ("channels.sr.edges.1", float("nan"), "channels.sr.edges.1: Input should be a finite number"),
    (f"{S}.bkg.nominal.sumw2", KeyError, f"{S}.bkg.nominal.sumw2: Field required"),
    ("normalisations.bkg_norm.kappa", 0.0, "bkg_norm.kappa: Input should be greater than or "
     "equal to 0.01"),
    ("normalisations.bkg_norm.kappa", -1.1, "kappa: Input should be greater than or equal"),
    (f"{S}.sig.nominal.sumw", [2.0, 3.0], f"{S}.sig.nominal.sumw: 2 entries for 3 bins"),
    (f"{S}.bkg.variations.jes.up", [1.0], f"{S}.bkg.variations.jes.up: 1 entries for 3 bins"),
    (f"{S}.sig.nominal.sumw.0", "2.0", f"{S}.sig.nominal.sumw.0: Input should be a valid number"),
    ("mc_stat", "yes", "likelihood.mc_stat: Input should be a valid boolean"),
    (S, {}, f"{S}: Dictionary should have at least 1 item"),
    ("signal", "sig", "likelihood.signal: Input should be a valid list, got 'sig'"),
    ("signal", [], "likelihood.signal: List should have at least 1 item"),
    ("signal", ["nope"], "likelihood.signal.0: 'nope' is not a sample of any channel"),
    ("channels", {"../../escape": SECTION["channels"]["sr"]}, "channel name '../../escape' is "
     "not allowed"),
    (f"{S}.data_obs", SECTION["channels"]["sr"]["samples"]["bkg"], "dataset name 'data_obs' is "
     "reserved"),
    ("normalisations.mu", {"datasets": ["bkg"], "kappa": 1.1}, "systematic name 'mu' is reserved"),
    (f"{S}.bkg.nominal.sumw2.0", -1.0, "nominal.sumw2: expected sums of squared weights >= 0"),
]


@pytest.mark.parametrize("path, value, expected", CASES, ids=[f"{c[0]}={c[1]!r:.20}" for c in CASES])
def test_tampered_section_is_one_line(tmp_path, capsys, path, value, expected):
    rc, err = _export(tmp_path, _tampered(path, value), capsys)
    assert rc == 2
    line = one_line_error(err)
    assert line.startswith(f"{ERROR_PREFIX}{tmp_path / 'results.json'}: likelihood.")
    assert expected in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_every_problem_is_a_line(tmp_path, capsys):
    sec = _tampered("normalisations.bkg_norm.kappa", 0.0)
    sec["signal"] = "sig"
    rc, err = _export(tmp_path, sec, capsys)
    assert rc == 2 and err.count("\n") == 2 and err.count(str(tmp_path / "results.json")) == 2


def test_duplicate_key_is_refused(tmp_path, capsys):
    text = json.dumps({"likelihood": SECTION})
    (tmp_path / "results.json").write_text('{"likelihood": {"signal": ["bkg"]}, ' + text[1:])
    capsys.readouterr()
    assert main(["export", str(tmp_path), "--quiet"]) == 2
    assert "(duplicate key 'likelihood'; each key once)" in one_line_error(capsys.readouterr().err)


def test_fifo_and_dev_zero_are_refused(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "results.json")
    capsys.readouterr()
    assert main(["export", str(fifo), "--quiet"]) == 2  # returns at once: never opened to wait
    assert "JSON results file is a FIFO; expected a regular file" in one_line_error(
        capsys.readouterr().err)
    zero = tmp_path / "zero"
    zero.mkdir()
    (zero / "results.json").symlink_to("/dev/zero")
    assert main(["export", str(zero), "--quiet"]) == 2
    assert "JSON results file is a device; expected a regular file" in one_line_error(
        capsys.readouterr().err)


def test_nothing_partial_when_a_write_fails(tmp_path, monkeypatch):
    """The ROOT file fails after the workspace was written: no file of the three (and no
    temporary folder) is left."""
    def broken(path, hists):
        raise DiffcoffeaError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr(E, "_write_root", broken)
    with pytest.raises(DiffcoffeaError, match="No space left on device"):
        E.write_exports(SECTION, tmp_path)
    assert list(tmp_path.iterdir()) == []
