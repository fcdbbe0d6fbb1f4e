"""Any UTF-8 dataset name and file path works, on every executor.

coffea's preprocessing hashes dataset names and file paths as ASCII
(``FileMeta.__hash__`` -> ``coffea.util._hash``), so a non-ASCII name or path used to
end in ``UnicodeEncodeError``. The driver now makes the chunks itself from its own
file check (``Evaluator.chunks``), so nothing hashes them; results.json and messages
show the names and paths as given.
"""

from __future__ import annotations

import shutil

import pytest

from tests.chunked_helpers import NANOAOD_WARNINGS, differences
from tests.faults_helpers import (
    compressed_baskets,
    evaluate,
    flip_byte,
    jets,
    one_line_error,
    write_nano,
)

pytestmark = NANOAOD_WARNINGS

NAME = "Drell–Yan→μμ(é)"  # any language, no whitespace (analysis/spec/names.py)


@pytest.mark.parametrize(
    "executor",
    [
        "iterative",
        pytest.param("futures", marks=pytest.mark.slow),
        pytest.param("dask", marks=pytest.mark.slow),
    ],
)
def test_utf8_dataset_name_and_path(executor, tmp_path, capsys) -> None:
    ascii_file = write_nano(tmp_path / "dy.root", jets(3))
    folder = tmp_path / "données"
    folder.mkdir()
    utf8_file = folder / "dy_é.root"
    shutil.copyfile(ascii_file, utf8_file)
    opts = ("--executor", executor, "--workers", "2", "--chunksize", "25")
    rc, want = evaluate(
        tmp_path, {"dy": {"files": [str(ascii_file)], "weight": "genWeight"}}, *opts
    )
    assert rc == 0, capsys.readouterr().err
    rc, got = evaluate(
        tmp_path,
        {
            NAME: {"files": [str(utf8_file)], "weight": "genWeight"},
            "dy": {"files": [str(ascii_file)], "weight": "genWeight"},
        },
        *opts,
        name="utf8.yaml",
    )
    assert rc == 0, capsys.readouterr().err
    assert list(got["datasets"]) == [NAME, "dy"]
    assert not differences(got["datasets"][NAME], want["datasets"]["dy"])


def test_utf8_path_in_an_error_message(tmp_path, capsys) -> None:
    good = write_nano(tmp_path / "good.root", jets(3))
    other = write_nano(tmp_path / "other.root", jets(4))
    lo, hi = compressed_baskets(other)["Jet_eta"][0]
    bad = flip_byte(other, tmp_path / "schön.root", (lo + hi) // 2)
    rc, _ = evaluate(tmp_path, {NAME: {"files": [str(good), str(bad)], "weight": "genWeight"}})
    assert rc == 2
    message = one_line_error(capsys)
    assert str(bad) in message and f"datasets.{NAME}" in message
