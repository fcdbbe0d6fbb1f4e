"""Hostile weights files (issue 37, classes 1, 4, 5): a standardisation std <= 0 is
refused as the config refuses it; a FIFO, a device, a directory or a symlink loop is
refused at once; a member whose header claims a huge shape, or whose uncompressed size
is beyond the network's (a zip bomb), is refused before anything is read."""

from __future__ import annotations

import functools
import os
import signal
import zipfile

import numpy as np
import pytest

from analysis import stats
from analysis.errors import InputError
from analysis.select.weights import load_weights, save_weights


@functools.cache
def like() -> stats.MLP:
    """The network the files are checked against: built on first use, not at import
    (its initialisation compiles JAX programs, which every test process paid while
    collecting, whether it ran these tests or not)."""
    return stats.mlp(3, hidden=(4,), seed=0)


@pytest.fixture(autouse=True)
def deadline():
    """A hang (a FIFO read) fails the test instead of stalling the suite."""

    def fail(*_):
        raise AssertionError("load_weights did not return within 10 s")

    like()  # built before the alarm is set: its first build compiles (seconds under load)

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def refused(path, pattern: str) -> str:
    with pytest.raises(InputError, match=pattern) as err:
        load_weights(path, like())
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("std", [0.0, -1.0])
def test_standardisation_std_not_positive(tmp_path, std):
    path = save_weights(tmp_path / "w.npz", like(), standard=stats.Standardisation(
        np.zeros(3), np.array([1.0, std, 2.0])))
    refused(path, rf"w.npz: standardisation.std\[1\] = {std:g}: expected values > 0")
    good = save_weights(tmp_path / "g.npz", like(), standard=stats.Standardisation(
        np.zeros(3), np.array([1.0, 0.5, 2.0])))
    assert load_weights(good, like())[1].std[1] == 0.5


def test_not_regular_files(tmp_path):
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    refused(fifo, "fifo.npz: weights file is not a regular file|fifo.npz: weights file is a FIFO")
    refused("/dev/zero", "/dev/zero: weights file is a device; expected a regular file")
    refused(tmp_path, "weights file is a directory; expected a regular file")
    loop = tmp_path / "loop.npz"
    loop.symlink_to(loop)
    refused(loop, "loop.npz: weights file is a symlink loop")


def _member(zf: zipfile.ZipFile, name: str, header: dict, body: int = 0) -> None:
    with zf.open(name + ".npy", "w", force_zip64=True) as f:
        np.lib.format.write_array_header_1_0(f, header)
        block = bytes(2**20)
        for _ in range(body // len(block)):
            f.write(block)


def test_header_claiming_a_huge_shape(tmp_path):
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as zf:
        _member(zf, "layers.0.weight", {"descr": "<f8", "fortran_order": False,
                                         "shape": (10**6, 10**6)})
    refused(path, r"huge.npz: layers.0.weight: expected shape \(4, 3\) .* found \(1000000, "
                  r"1000000\)")


def test_zip_bomb(tmp_path):
    """64 MB of zeros, ~64 KB on disk, where the network's member is 96 bytes."""
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        _member(zf, "layers.0.weight", {"descr": "<f8", "fortran_order": False,
                                         "shape": (4, 3)}, body=64 * 2**20)
    assert path.stat().st_size < 2**20
    refused(path, r"bomb.npz: layers.0.weight: \d+ bytes uncompressed, more than the 10096 of "
                  r"shape \(4, 3\)")


def test_a_good_file_still_loads(tmp_path):
    path = save_weights(tmp_path / "ok.npz", like())
    net, standard = load_weights(path, like())
    assert standard is None and net.n_inputs == 3
