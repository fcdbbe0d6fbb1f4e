"""Stored programs are untrusted input (issue 54): nothing of a file is unpickled or
loaded before its HMAC (this user's key, the entry's name) matches; a planted pickle
runs nothing, and a flipped, truncated, rotated, FIFO, /dev/zero-linked or oversized
entry is compiled again with one debug line and the same result; a full disk leaves no
temporary file; an executable's custom calls are registered before it is loaded."""

from __future__ import annotations

import errno
import os
import pickle

import jax.numpy as jnp
import numpy as np
import pytest

from analysis.stats import _stored, _storedfile
from tests.stats.test_stored_programs import store  # noqa: F401  (the fixture)


def _fun(x, power):  # noqa: ANN001, ANN202
    return {"y": jnp.sum(x ** power), "solve": jnp.linalg.solve(jnp.eye(2) * 2.0, x[:2])}


X = jnp.asarray(np.arange(1.0, 5.0))


def _call():  # noqa: ANN202
    return _stored.stored_call("test_hostile", _fun, X, power=3)


def _entry(where) -> str:  # noqa: ANN001
    (name,) = os.listdir(where)
    return str(where / name)


def _again(where, caplog):  # noqa: ANN001, ANN202
    """A new process's call: the in-process programs forgotten; returns the result
    and the debug lines about stored programs."""
    _stored._CALLS.clear()
    caplog.clear()
    with caplog.at_level("DEBUG", logger="analysis.stats"):
        out = _call()
    return out, [r.getMessage() for r in caplog.records if "stored program" in r.getMessage()]


def _same(a, b) -> None:  # noqa: ANN001
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))


def _flip(path: str) -> None:
    raw = bytearray(open(path, "rb").read())
    raw[len(raw) // 2] ^= 0x01
    open(path, "wb").write(bytes(raw))


def _truncate(path: str) -> None:
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[: len(raw) // 2])


def _fifo(path: str) -> None:
    os.remove(path)
    os.mkfifo(path)


def _dev_zero(path: str) -> None:
    os.remove(path)
    os.symlink("/dev/zero", path)


class _Planted:
    def __reduce__(self):  # noqa: ANN204
        return (os.system, (f"touch {os.environ['PLANTED_MARKER']}",))


def _planted(path: str) -> None:
    with open(path, "wb") as fh:
        fh.write(pickle.dumps((_stored.EXECUTABLE, _Planted(), None, None, None)))


def _planted_with_header(path: str) -> None:
    """A planted pickle behind a well-formed header, with a digest anyone can compute."""
    body = pickle.dumps(_Planted())
    with open(path, "wb") as fh:
        fh.write(_storedfile.MAGIC + b"0" * 64 + b"\n" + body)


@pytest.mark.parametrize("spoil", [_flip, _truncate, _fifo, _dev_zero, _planted,
                                   _planted_with_header],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_spoilt_entry_is_compiled_again(store, caplog, tmp_path, monkeypatch, spoil):  # noqa: ANN001, F811
    marker = tmp_path / "planted-ran"
    monkeypatch.setenv("PLANTED_MARKER", str(marker))
    first = _call()
    path = _entry(store)
    assert _stored.kind(path) == _stored.EXECUTABLE
    spoil(path)
    out, lines = _again(store, caplog)
    _same(out, first)
    assert not marker.exists()
    assert len(lines) == 1 and "not used" in lines[0], lines
    assert _stored.kind(path) == _stored.EXECUTABLE  # written again
    out, lines = _again(store, caplog)  # loaded, without a word
    _same(out, first)
    assert lines == []


def test_rotated_and_oversized_entries(store, caplog, monkeypatch):  # noqa: ANN001, F811
    square = _stored.stored_call("test_hostile", _fun, X, power=2)
    first = _call()
    a, b = (str(store / n) for n in sorted(os.listdir(store)))
    raw_a, raw_b = open(a, "rb").read(), open(b, "rb").read()
    open(a, "wb").write(raw_b)  # each authentic entry under the other's name
    open(b, "wb").write(raw_a)
    assert _stored.kind(a) is None and _stored.kind(b) is None
    out, lines = _again(store, caplog)
    _same(out, first)
    assert len(lines) == 1 and "HMAC" in lines[0], lines
    _stored._CALLS.clear()
    _same(_stored.stored_call("test_hostile", _fun, X, power=2), square)
    monkeypatch.setattr(_storedfile, "MAX_BYTES", 64)
    out, lines = _again(store, caplog)
    _same(out, first)
    assert len(lines) == 1 and "over 64" in lines[0], lines


def test_a_full_disk_leaves_no_temporary_file(store, caplog, monkeypatch):  # noqa: ANN001, F811
    real = os.fdopen

    class Full:
        def __init__(self, fd, mode="r", *a, **k):  # noqa: ANN001
            self.file = real(fd, mode, *a, **k)

        def __enter__(self):  # noqa: ANN204
            return self

        def __exit__(self, *exc):  # noqa: ANN002, ANN204
            self.file.close()

        def write(self, data):  # noqa: ANN001, ANN202
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_stored.os, "fdopen", Full)
    with caplog.at_level("DEBUG", logger="analysis.stats"):
        out = _call()
    monkeypatch.undo()
    assert float(out["y"]) == 100.0
    assert not store.exists() or os.listdir(store) == []
    assert any("not stored" in r.getMessage() for r in caplog.records)


def test_custom_calls_are_registered_before_a_load(store):  # noqa: ANN001, F811
    """The LAPACK routine of jnp.linalg.solve is named in the header, and a load runs
    the registration first (a process that had not lowered linear algebra crashed)."""
    _call()
    key = _storedfile.key_()
    header, _ = _storedfile.read(_entry(store), key)
    assert any(t.startswith("lapack_") for t in header["targets"]), header
    calls = []
    real = _storedfile._register_jax_targets
    _storedfile._LINALG_READY.clear()
    try:
        _storedfile._register_jax_targets = lambda: calls.append(1) or real()
        _stored._CALLS.clear()
        _call()
    finally:
        _storedfile._register_jax_targets = real
    assert calls == [1]
