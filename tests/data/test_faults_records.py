"""The fault record itself: one-line causes, merging, and the ``guarded`` wrapper."""

from __future__ import annotations

import zlib

import pytest

from analysis.data.faults import FAULTS_KEY, Dropped, Fault, Faults, describe, guarded, note_dropped
from analysis.errors import InputError


class _Events:
    metadata = {"dataset": "dy", "filename": "/d/f.root", "entrystart": 10, "entrystop": 20}


class _Proc:
    def __init__(self, error: BaseException | None = None, drop: int = 0) -> None:
        self.error, self.drop = error, drop

    @guarded
    def process(self, events):
        note_dropped("Jet_pt", objects=self.drop)
        if self.error is not None:
            raise self.error
        return {"dy": 1}


def _wrapped(inner: BaseException) -> Exception:
    try:
        try:
            raise inner
        except BaseException as err:
            raise Exception("Failed processing file: WorkItem(...)\n\nmore") from err
    except Exception as outer:
        return outer


def test_describe_names_the_innermost_cause_on_one_line() -> None:
    text = describe(_wrapped(zlib.error("Error -3 while decompressing data:\n bad")))
    assert text == "zlib.error: Error -3 while decompressing data: bad"
    awkward_like = ValueError("broken offsets\n\nThis error occurred while calling\n\n  ak.x(...)")
    assert describe(_wrapped(awkward_like)) == "ValueError: broken offsets"
    assert describe(_wrapped(InputError("f.root: no branch 'x'"))) == "f.root: no branch 'x'"
    assert len(describe(ValueError("x" * 1000))) == 300


def test_guarded_returns_a_record_instead_of_raising() -> None:
    out = _Proc(zlib.error("Error -3")).process(_Events())
    assert list(out) == [FAULTS_KEY]
    (fault,) = out[FAULTS_KEY].skipped_list()
    assert (fault.dataset, fault.file, fault.start, fault.stop) == ("dy", "/d/f.root", 10, 20)
    assert fault.reason == "zlib.error: Error -3" and fault.kind == "read"
    assert "Traceback" in fault.detail
    assert _Proc(InputError("bad")).process(_Events())[FAULTS_KEY].skipped_list()[0].kind == "input"
    with pytest.raises(KeyboardInterrupt):
        _Proc(KeyboardInterrupt()).process(_Events())


def test_guarded_raises_outside_a_coffea_chunk() -> None:
    class Plain:
        metadata = {"dataset": "dy"}  # no entry range: called directly, not by an executor

    with pytest.raises(zlib.error):
        _Proc(zlib.error("Error -3")).process(Plain())


def test_guarded_attaches_dropped_counts_only_when_there_are_some() -> None:
    assert _Proc().process(_Events()) == {"dy": 1}
    out = _Proc(drop=3).process(_Events())
    assert out["dy"] == 1
    assert out[FAULTS_KEY].dropped_totals() == {
        "dy": {"objects": 3, "events": 0, "branches": {"Jet_pt": 3}}
    }
    note_dropped("Jet_pt", objects=5)  # outside a guarded process: nothing to record


def test_faults_merge_is_a_union_per_chunk() -> None:
    a = Faults([Fault("dy", "f", 0, 10, "r")], [Dropped("dy", "f", 0, 10, "Jet_pt", 2, 0)])
    b = Faults([Fault("dy", "f", 10, 20, "r")], [Dropped("dy", "f", 10, 20, "genWeight", 0, 1)])
    total = a + b + a  # the same chunk met in two passes counts once
    assert [(f.start, f.stop) for f in total.skipped_list()] == [(0, 10), (10, 20)]
    assert total.dropped_totals() == {
        "dy": {"objects": 2, "events": 1, "branches": {"Jet_pt": 2, "genWeight": 1}}
    }
    assert (b + a).dropped_totals() == total.dropped_totals()
    assert not Faults() and total


def test_guarded_retries_reading_errors_as_configured() -> None:
    class Flaky:
        calls = 0

        @guarded
        def process(self, events):
            self.calls += 1
            note_dropped("Jet_pt", objects=1)
            if self.calls < 3:
                raise OSError("timeout")
            return {"dy": 1}

    class Retrying(_Events):
        metadata = {**_Events.metadata, "retries": 2}

    proc = Flaky()
    out = proc.process(Retrying())
    assert proc.calls == 3 and out["dy"] == 1
    assert out[FAULTS_KEY].dropped_totals()["dy"]["objects"] == 1  # the last attempt only
    proc = Flaky()
    assert list(proc.process(_Events())) == [FAULTS_KEY] and proc.calls == 1
    failing = _Proc(InputError("no branch"))
    assert list(failing.process(Retrying())) == [FAULTS_KEY]  # not retried


def test_corrupt_bytes_are_not_retried() -> None:
    """A decompression error (a corrupt basket) is a bad file, not a transient fault:
    one attempt whatever ``retries`` says (issue 37: retries: 10**9 retried forever)."""
    import zlib

    class Corrupt:
        calls = 0

        @guarded
        def process(self, events):
            self.calls += 1
            try:
                zlib.decompress(b"not zlib")
            except zlib.error as err:
                raise ValueError("basket 3 of Jet_pt") from err

    class Retrying(_Events):
        metadata = {**_Events.metadata, "retries": 10}

    proc = Corrupt()
    assert list(proc.process(Retrying())) == [FAULTS_KEY] and proc.calls == 1
