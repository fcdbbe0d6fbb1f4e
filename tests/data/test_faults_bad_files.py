"""Bad files on every executor: one line naming file, entries and cause, or skipped and listed.

A byte flipped inside a compressed basket, a truncated file, a directory named
``x.root``, a file without the tree: ``evaluate`` exits 2 with ONE line naming the
file, the entry range (for a chunk) and the cause, whether the damage is met in the
driver or in a worker (the bad file is the dataset's second, so only a worker reads
its baskets). With ``--skip-bad-files`` (or ``skip_bad_files: true``) the pass goes
on, results equal those without the bad file, and every skipped chunk is listed in
results.json and in the summary. A file without run/luminosityBlock/event works.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis.cli.parser import main
from analysis.errors import InputError
from tests.chunked_helpers import NANOAOD_WARNINGS, analysis_config, differences
from tests.conftest import write_config
from tests.faults_helpers import (
    N_EVENTS,
    compressed_baskets,
    evaluate,
    flip_byte,
    jets,
    one_line_error,
    truncate,
    write_nano,
)

pytestmark = NANOAOD_WARNINGS

EXECUTORS = [
    "iterative",
    pytest.param("futures", marks=pytest.mark.slow),
    pytest.param("dask", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    good = write_nano(d / "good.root", jets(1))
    other = write_nano(d / "other.root", jets(2))
    lo, hi = compressed_baskets(other)["Jet_pt"][0]
    (d / "x.root").mkdir()
    truncated = truncate(other, d / "truncated.root", other.stat().st_size // 2)
    header = truncate(other, d / "header.root", 200)  # not even the directory is left
    return {
        "good": good,
        "other": other,
        "flipped": flip_byte(other, d / "flipped.root", (lo + hi) // 2),
        "truncated": truncated,
        "header": header,
        "directory": d / "x.root",
        "noid": write_nano(d / "noid.root", jets(2), ids=False),
    }


def _ds(*paths: Path) -> dict:
    return {"dy": {"files": [str(p) for p in paths], "weight": "genWeight"}}


@pytest.mark.parametrize("executor", EXECUTORS)
def test_flipped_basket_read_in_a_worker_is_one_line(executor, files, tmp_path, capsys) -> None:
    rc, results = evaluate(
        tmp_path,
        _ds(files["good"], files["flipped"]),
        "--executor", executor, "--workers", "2", "--chunksize", "30",
    )  # fmt: skip
    assert rc == 2 and results is None
    message = one_line_error(capsys)
    assert str(files["flipped"]) in message
    assert "entries 0-30" in message and "datasets.dy" in message
    assert "zlib" in message or "decompress" in message, message
    assert "--skip-bad-files" in message


@pytest.mark.parametrize("executor", EXECUTORS)
def test_skip_bad_files_goes_on_and_lists_every_skipped_chunk(
    executor, files, tmp_path, capsys
) -> None:
    opts = ("--executor", executor, "--workers", "2", "--chunksize", "30")
    rc, clean = evaluate(tmp_path, _ds(files["good"]), *opts, name="clean.yaml")
    assert rc == 0, capsys.readouterr().err
    rc, results = evaluate(
        tmp_path,
        _ds(files["good"], files["flipped"], files["truncated"]),
        *opts,
        "--skip-bad-files",
    )
    assert rc == 0, capsys.readouterr().err
    assert capsys.readouterr().err == ""
    assert not differences(results["datasets"]["dy"], clean["datasets"]["dy"])
    faults = results["faults"]
    assert faults["skip_bad_files"] is True
    skipped = {(f["file"], tuple(f["entries"] or ())): f["reason"] for f in faults["skipped"]}
    flipped, truncated = str(files["flipped"]), str(files["truncated"])
    # The flipped basket holds every entry: both chunks go. The truncated file's header
    # and tree are intact (uproot writes them first), so its chunks fail when read.
    assert set(skipped) == {(f, e) for f in (flipped, truncated) for e in ((0, 30), (30, 60))}
    assert "zlib" in skipped[(flipped, (0, 30))] or "decompress" in skipped[(flipped, (0, 30))]
    assert all(reason for reason in skipped.values())


def test_skip_bad_files_from_the_config_and_in_the_summary(
    files, tmp_path, capsys, monkeypatch
) -> None:
    # The summary folds lines at the console's width (tests/cli/test_tables.py), which
    # rich takes from COLUMNS or the terminal: a test process's, or pytest-xdist's
    # worker's (whose paths are longer, popen-gw0/). Wide enough for these lines here.
    monkeypatch.setenv("COLUMNS", "1000")
    data = analysis_config(_ds(files["good"], files["flipped"]))
    data["skip_bad_files"] = True
    path = write_config(tmp_path, data)
    rc = main(["evaluate", str(path), "-o", str(tmp_path / "out"), "--chunksize", "30"])
    assert rc == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("skipped")]
    assert len(lines) == 2, out
    assert all(str(files["flipped"]) in line for line in lines)
    assert "entries 0-30" in lines[0] and "entries 30-60" in lines[1]


DRIVER_CASES = {
    "header": ["not a readable ROOT file"],
    "directory": ["is a directory, not a ROOT file"],
}


@pytest.mark.parametrize("case", list(DRIVER_CASES))
def test_unreadable_file_is_one_line_before_any_chunk(case, files, tmp_path, capsys) -> None:
    rc, _ = evaluate(tmp_path, _ds(files["good"], files[case]))
    assert rc == 2
    message = one_line_error(capsys)
    assert str(files[case]) in message and "datasets.dy" in message
    for text in DRIVER_CASES[case]:
        assert text in message, message


def test_a_directory_matched_by_a_glob_is_a_bad_file(files, tmp_path, capsys) -> None:
    pattern = str(files["good"].parent / "*.root")
    rc, results = evaluate(
        tmp_path, {"dy": {"files": [pattern], "weight": "genWeight"}}, "--skip-bad-files"
    )
    assert rc == 0, capsys.readouterr().err
    reasons = {f["file"]: f["reason"] for f in results["faults"]["skipped"]}
    assert reasons[str(files["directory"])] == "is a directory, not a ROOT file"


def test_missing_tree_is_one_line(files, tmp_path, capsys) -> None:
    data = _ds(files["good"])
    data["dy"]["treename"] = "Evnts"
    rc, _ = evaluate(tmp_path, data)
    assert rc == 2
    message = one_line_error(capsys)
    assert str(files["good"]) in message and "no tree 'Evnts'" in message and "Events" in message


def test_file_without_event_ids_works(files, tmp_path, capsys) -> None:
    rc, with_ids = evaluate(tmp_path, _ds(files["other"]), name="ids.yaml")
    assert rc == 0, capsys.readouterr().err
    rc, without = evaluate(tmp_path, _ds(files["noid"]), "--chunksize", "25")
    assert rc == 0, capsys.readouterr().err
    assert capsys.readouterr().err == ""
    assert without["datasets"]["dy"]["events"] == N_EVENTS
    assert not differences(without["datasets"]["dy"], with_ids["datasets"]["dy"], skip=("chunks",))


def test_debug_shows_the_worker_traceback(files, tmp_path) -> None:
    path = write_config(tmp_path, analysis_config(_ds(files["good"], files["flipped"])))
    with pytest.raises(InputError, match="entries 0-60") as info:
        main(["--debug", "evaluate", str(path), "--quiet", "-o", str(tmp_path / "out")])
    cause = info.value.__cause__
    assert cause is not None and "Traceback" in str(cause) and "zlib" in str(cause)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_file_damaged_after_the_check_is_one_line(executor, tmp_path, capsys) -> None:
    """A file that fails to open in a worker (before ``process``): coffea's own wrapper
    error becomes one line too, and the futures executor's printed traceback is held back."""
    from analysis.config.loader import config_from_dict
    from analysis.driver.runner import Evaluator
    good = write_nano(tmp_path / "good.root", jets(1))
    later = write_nano(tmp_path / "later.root", jets(2))
    data = analysis_config(_ds(good, later))
    data["executor"] = {"type": executor, "workers": 2, "chunksize": 30}
    with Evaluator(config_from_dict(data, base_dir=tmp_path)) as ev:
        assert len(ev.chunks) == 4
        later.write_bytes(b"not ROOT any more" * 10)
        with pytest.raises(InputError) as info:
            ev.run()
    message = str(info.value)
    # Either chunk of the file may fail first on the parallel executors.
    assert "\n" not in message and re.match(
        rf"{re.escape(str(later))}, entries (0-30|30-60) \(datasets\.dy\): ", message
    ), message
    assert "ValueError: not a ROOT file" in message and "WorkItem" not in message, message
    assert "Traceback" not in capsys.readouterr().err
