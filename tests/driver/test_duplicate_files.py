"""A file listed twice in a dataset is read once, with one warning line (issue 21.6).

The same path twice, a glob that matches a listed file, a symlink to it, or a copy
(same ROOT file UUID): before, a symlink or a copy counted the events twice.
"""

from __future__ import annotations

import os
import shutil
import warnings

import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import resolve_fileset
from analysis.errors import DiffcoffeaWarning
from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.faults_helpers import N_EVENTS, evaluate, jets, write_nano

pytestmark = NANOAOD_WARNINGS


@pytest.fixture
def files(tmp_path):
    a = write_nano(tmp_path / "a.root", jets(1))
    write_nano(tmp_path / "b.root", jets(2))  # another file: not a duplicate
    os.symlink(a, tmp_path / "link.root")
    shutil.copyfile(a, tmp_path / "copy.root")
    return tmp_path


@pytest.mark.parametrize("listed,what", [
    (["a.root", "a.root"], "is the same file as"),
    (["a.root", "a*.root"], "is the same file as"),
    (["a.root", "link.root"], "is the same file as"),
    (["a.root", "copy.root"], "is a copy (same ROOT file UUID and size) of"),
])
def test_counted_once_with_one_warning(files, listed, what) -> None:
    cfg = config_from_dict({"datasets": {"d": {"files": listed}}}, source="c.yaml",
                           base_dir=files)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fs = resolve_fileset(cfg)
    ours = [w for w in caught if issubclass(w.category, DiffcoffeaWarning)]
    assert ours and all(what in str(w.message) for w in ours)
    assert str(ours[0].message).startswith("c.yaml: datasets.d.files: ")
    assert str(ours[0].message).endswith("a.root; counted once")
    paths = [os.path.basename(p) for p in fs["d"]["files"]]
    assert paths.count("a.root") == 1
    assert not {"link.root", "copy.root"} & set(paths)


def test_the_command_line_prints_one_warning_line(files, tmp_path, capsys) -> None:
    ds = {"d": {"files": [str(files / "a.root"), str(files / "link.root")],
                "weight": "genWeight"}}
    rc, results = evaluate(tmp_path, ds)
    assert rc == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("diffcoffea: warning: "), err
    assert "link.root is the same file as" in err
    assert results["datasets"]["d"]["events"] == N_EVENTS
