"""``skip_bad_files`` skips bad files only (issue 21.2).

A chunk beyond ``max_objects``, a bug or a ``MemoryError`` in the kernel is not a bad
file: skipping it would bias what remains (toward low multiplicities, for a cap), so it
stops the run with one line even with ``--skip-bad-files``. A chunk that cannot be read
is skipped, listed with its events, and results.json says what fraction of each
dataset's events was skipped.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from analysis.data.faults import FAULTS_KEY, guarded, reading
from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.faults_helpers import (
    compressed_baskets,
    evaluate,
    flip_byte,
    jets,
    one_line_error,
    write_nano,
)

pytestmark = NANOAOD_WARNINGS


class _Events:
    metadata = {"dataset": "dy", "filename": "/d/f.root", "entrystart": 10, "entrystop": 20}


class _Proc:
    def __init__(self, error: BaseException, *, in_reading: bool) -> None:
        self.error, self.in_reading = error, in_reading

    @guarded
    def process(self, events):
        if self.in_reading:
            with reading():
                raise self.error
        raise self.error


@pytest.mark.parametrize(
    "error,in_reading,kind",
    [
        (ValueError("broken offsets"), True, "read"),  # awkward on a damaged basket
        (ValueError("a bug"), False, "error"),
        (MemoryError("Unable to allocate 201 GiB"), True, "error"),
        (MemoryError("Unable to allocate 201 GiB"), False, "error"),
        (OverflowError("Python int too large"), False, "error"),
        (zlib.error("Error -3"), False, "read"),
        (OSError("short read"), False, "read"),
    ],
)
def test_only_reading_errors_are_bad_files(error, in_reading, kind) -> None:
    (fault,) = _Proc(error, in_reading=in_reading).process(_Events())[FAULTS_KEY].skipped_list()
    assert fault.kind == kind
    assert fault.events == 10 and fault.to_json()["events"] == 10


def _many_jets(n_events: int = 60) -> dict:
    rng = np.random.default_rng(3)
    counts = np.full(n_events, 3)
    counts[45] = 8  # one event of the second chunk beyond the cap
    total = int(counts.sum())
    return {"counts": counts, "pt": rng.uniform(10, 100, total),
            "eta": rng.normal(0, 1.5, total), "weight": np.ones(n_events)}


def _capped(path) -> dict:
    return {
        "datasets": {"dy": {"files": [str(path)], "weight": "genWeight"}},
        "executor": {"type": "iterative", "chunksize": 30},
        "objects": {"jets": {"collection": "Jet", "max_objects": 6,
                             "cuts": [{"var": "pt", "op": ">", "value": 30.0, "width": 5.0}]}},
        "selection": [{"count": "jets", "op": ">=", "value": 1}],
        "observables": [{"name": "n", "x": "count(jets)", "stats": ["mean"]}],
    }


def test_a_chunk_beyond_max_objects_is_never_skipped(tmp_path, capsys) -> None:
    path = write_nano(tmp_path / "many.root", _many_jets())
    cfg = _capped(path)
    rc, results = evaluate(tmp_path, cfg["datasets"], "--skip-bad-files", config=cfg)
    assert rc == 2 and results is None
    line = one_line_error(capsys)
    assert "entries 30-60 (datasets.dy): collection 'Jet': event 45 has 8 objects, more than " \
           "max_objects=6; raise objects.jets.max_objects" in line, line
    assert "skip" not in line


def test_skipped_chunks_carry_their_events_and_fraction(tmp_path, capsys) -> None:
    good = write_nano(tmp_path / "good.root", jets(1))
    other = write_nano(tmp_path / "other.root", jets(2))
    lo, hi = compressed_baskets(other)["Jet_pt"][0]
    flipped = flip_byte(other, tmp_path / "flipped.root", (lo + hi) // 2)
    ds = {"dy": {"files": [str(good), str(flipped)], "weight": "genWeight"}}
    rc, results = evaluate(tmp_path, ds, "--skip-bad-files", "--chunksize", "30")
    assert rc == 0, capsys.readouterr().err
    faults = results["faults"]
    assert [f["events"] for f in faults["skipped"]] == [30, 30]
    assert faults["skipped_fraction"] == {"dy": 0.5}  # 60 of the 120 entries
    assert results["datasets"]["dy"]["events"] == 60
