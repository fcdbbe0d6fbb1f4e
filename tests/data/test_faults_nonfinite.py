"""Non-finite values never pass silently.

A NaN jet pT, an infinite weight or a NaN in a per-event branch the plan reads:
by default ``evaluate`` exits 2 with one line naming the file, the branch and the
first such entry (its number in the file, whatever the chunking). With
``nonfinite: drop`` the affected events are dropped (a jet is never dropped alone: that
would change its event's counts and indices), their numbers are
reported, and the results equal those of the same file written without them
(the reference). Before this, one NaN jet pT made every statistic ``null``, exit 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.chunked_helpers import NANOAOD_WARNINGS, differences
from tests.faults_helpers import evaluate, jets, one_line_error, write_nano

pytestmark = NANOAOD_WARNINGS

BAD_EVENT = 37  # in the third chunk of 15 events


def _damaged(kind: str) -> tuple[dict, dict]:
    """``(columns with one non-finite value, the reference without the affected entries)``."""
    cols = jets(7)
    counts = cols["counts"].copy()
    first_jet = int(counts[:BAD_EVENT].sum())
    assert counts[BAD_EVENT] >= 2
    bad = {k: np.array(v, dtype=np.float64) for k, v in cols.items()}
    ref = {k: np.array(v, dtype=np.float64) for k, v in cols.items()}
    if kind == "jet pt":
        bad["pt"][first_jet + 1] = np.nan
    else:
        bad["weight"][BAD_EVENT] = np.inf
    # either way the whole event goes
    jets_of_event = np.arange(first_jet, first_jet + counts[BAD_EVENT])
    ref["pt"] = np.delete(ref["pt"], jets_of_event)
    ref["eta"] = np.delete(ref["eta"], jets_of_event)
    ref["counts"] = np.delete(counts, BAD_EVENT)
    ref["weight"] = np.delete(ref["weight"], BAD_EVENT)
    bad["counts"] = counts
    return bad, ref


CASES = {"jet pt": ("Jet_pt", "nan"), "weight": ("genWeight", "inf")}


@pytest.mark.parametrize("kind", list(CASES))
def test_nonfinite_value_is_one_line_naming_file_branch_and_entry(kind, tmp_path, capsys) -> None:
    bad, _ = _damaged(kind)
    path = write_nano(tmp_path / "bad.root", bad)
    rc, results = evaluate(
        tmp_path, {"dy": {"files": [str(path)], "weight": "genWeight"}}, "--chunksize", "15"
    )
    assert rc == 2 and results is None
    message = one_line_error(capsys)
    branch, value = CASES[kind]
    assert str(path) in message
    assert f"branch '{branch}'" in message and f"({value})" in message
    assert f"at entry {BAD_EVENT}" in message, message
    assert "nonfinite: drop" in message


@pytest.mark.parametrize("kind", list(CASES))
def test_nonfinite_drop_equals_the_file_without_them(kind, tmp_path, capsys) -> None:
    bad, ref = _damaged(kind)
    bad_path = write_nano(tmp_path / "bad.root", bad)
    ref_path = write_nano(tmp_path / "ref.root", ref)
    rc, got = evaluate(
        tmp_path,
        {"dy": {"files": [str(bad_path)], "weight": "genWeight"}},
        "--chunksize", "15",
        config={"nonfinite": "drop"},
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    rc, want = evaluate(
        tmp_path,
        {"dy": {"files": [str(ref_path)], "weight": "genWeight"}},
        "--chunksize", "15",
        name="ref.yaml",
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert not differences(got["datasets"]["dy"], want["datasets"]["dy"])
    branch, _ = CASES[kind]
    dropped = got["faults"]["dropped"]["dy"]
    assert dropped == {"objects": 0, "events": 1, "branches": {branch: 1}}
    assert got["faults"]["nonfinite"] == "drop"
    stats = got["datasets"]["dy"]["observables"]["jet_pt"]
    assert all(entry["value"] is not None for entry in stats.values())


def test_nonfinite_drop_is_in_the_summary(tmp_path, capsys) -> None:
    from analysis.cli.parser import main
    from tests.chunked_helpers import analysis_config
    from tests.conftest import write_config

    bad, _ = _damaged("jet pt")
    path = write_nano(tmp_path / "bad.root", bad)
    data = analysis_config({"dy": {"files": [str(path)], "weight": "genWeight"}})
    data["nonfinite"] = "drop"
    config = write_config(tmp_path, data)
    assert main(["evaluate", str(config), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "dropped dy: 0 objects and 1 events with non-finite values (Jet_pt 1)" in out
