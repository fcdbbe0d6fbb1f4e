"""Fuzz: a real NanoAOD file with flipped bytes or cut short, through the command line.

``shared/data/nano_tt_v12.root`` (200 events, 654 zlib-compressed branches) is damaged
in a fixed list of ways, each drawn from a seed: a byte XOR-ed inside the compressed
basket of a branch the analysis reads (Jet_pt, Jet_eta, nJet, genWeight), inside the
basket of a branch it does not read, anywhere in the file, or the file truncated at a
random length. Every run must end in exit 0 with results equal to the clean file's,
or exit 2 with one line naming the file; never a traceback, a hang or a crash. Flips
in read baskets must be caught (exit 2: zlib's checksum sees them); flips in baskets
not read must not matter (exit 0: only what the plan needs is read).

Runs go in-process through ``main(argv)``; two go through a subprocess (another
executor, and to see the real stderr and exit code).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.cli.parser import main
from tests.chunked_helpers import NANOAOD_WARNINGS, analysis_config, differences
from tests.conftest import write_config
from tests.faults_helpers import compressed_baskets

pytestmark = [*NANOAOD_WARNINGS, pytest.mark.slow]

SOURCE = "nano_tt_v12.root"
READ = ("Jet_pt", "Jet_eta", "nJet", "genWeight")
CASES = (
    [("read", s) for s in range(6)]
    + [("unread", s) for s in range(3)]
    + [("anywhere", s) for s in range(3)]
    + [("truncate", s) for s in range(4)]
)
SUBPROCESS_TIMEOUT = 300


def damage(raw: bytes, baskets: dict, mode: str, seed: int) -> tuple[bytes, str]:
    """The damaged bytes and a description, drawn from ``seed``."""
    rng = np.random.default_rng([seed, len(mode)])
    if mode == "truncate":
        size = int(rng.integers(0, len(raw)))
        return raw[:size], f"truncated to {size} bytes"
    if mode == "anywhere":
        lo, hi, what = 0, len(raw), "file"
    else:
        names = sorted(READ if mode == "read" else set(baskets) - set(READ))
        what = names[int(rng.integers(len(names)))]
        lo, hi = baskets[what][0]
    position = int(rng.integers(lo, hi))
    data = bytearray(raw)
    data[position] ^= int(rng.integers(1, 256))
    return bytes(data), f"byte {position} flipped ({what})"


@pytest.fixture(scope="module")
def subject(shared_data, tmp_path_factory):
    """``(raw bytes, compressed baskets, work dir, clean results)``."""
    path = shared_data / SOURCE
    work = tmp_path_factory.mktemp("fuzz")
    raw = path.read_bytes()
    (work / "f.root").write_bytes(raw)
    rc, clean = _run(work)
    assert rc == 0
    return raw, compressed_baskets(path), work, clean


def _config(work: Path) -> Path:
    data = analysis_config({"tt": {"files": [str(work / "f.root")], "weight": "genWeight"}})
    return write_config(work, data)


def _run(work: Path, *extra: str) -> tuple[int, dict | None]:
    results = work / "out" / "results.json"
    if results.exists():
        results.unlink()
    argv = [
        "evaluate",
        str(_config(work)),
        "-o",
        str(work / "out"),
        "--quiet",
        "--chunksize",
        "100",
    ]
    rc = main([*argv, *extra])
    return rc, (json.loads(results.read_text())["datasets"] if rc == 0 else None)


@pytest.mark.parametrize(("mode", "seed"), CASES, ids=[f"{m}-{s}" for m, s in CASES])
def test_damaged_file_is_clean_result_or_one_line(mode, seed, subject, capsys) -> None:
    raw, baskets, work, clean = subject
    data, what = damage(raw, baskets, mode, seed)
    (work / "f.root").write_bytes(data)
    rc, got = _run(work)
    err = capsys.readouterr().err
    if rc == 0:
        assert err == "", (what, err)
        assert not differences(got, clean, rtol=0.0), what
    else:
        assert rc == 2, (what, rc, err)
        assert err.startswith("diffcoffea: error: ") and err.count("\n") == 1, (what, err)
        assert str(work / "f.root") in err, (what, err)
    if mode == "read":
        assert rc == 2, f"{what}: damage in a basket that is read went unnoticed"
    if mode == "unread":
        assert rc == 0, f"{what}: damage in a basket that is not read stopped the run: {err}"


@pytest.mark.parametrize(
    ("mode", "seed", "executor"), [("read", 0, "futures"), ("truncate", 1, "iterative")]
)
def test_damaged_file_through_a_subprocess(mode, seed, executor, subject, tmp_path) -> None:
    raw, baskets, _, _ = subject
    data, what = damage(raw, baskets, mode, seed)
    (tmp_path / "f.root").write_bytes(data)
    cmd = [sys.executable, "-m", "analysis", "evaluate", str(_config(tmp_path)), "--quiet"]
    cmd += ["-o", str(tmp_path / "out"), "--executor", executor, "--workers", "2"]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, env=dict(os.environ)
    )
    assert proc.returncode == 2, (what, proc.returncode, proc.stderr[-2000:])
    assert proc.stderr.startswith("diffcoffea: error: "), (what, proc.stderr[-2000:])
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert str(tmp_path / "f.root") in proc.stderr
