"""Shared helpers for the data-fault tests (``test_faults_*``): small NanoAOD-layout
files, damaged copies, and running ``evaluate`` through the CLI's ``main``.

Not a test module. The small files have the few branches the analysis of
:func:`tests.chunked_helpers.analysis_config` reads, so that opening them is fast;
the real files in ``shared/data`` (1000+ branches, seconds to open on a loaded
machine) are used by the fuzz test.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import pytest
import uproot

from analysis.cli.parser import main
from tests.chunked_helpers import analysis_config
from tests.conftest import one_line_error as conftest_one_line_error
from tests.conftest import write_config

N_EVENTS = 60


def jets(seed: int = 5, n: int = N_EVENTS) -> dict[str, Any]:
    """Columns of a small sample: jets (pt, eta), a genWeight, event IDs."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(3, n)
    total = int(counts.sum())
    return {
        "counts": counts,
        "pt": rng.exponential(40, total) + 10.0,
        "eta": rng.normal(0, 1.5, total),
        "weight": rng.normal(1.0, 0.2, n),
    }


def write_nano(path: Path, cols: Mapping[str, Any], *, ids: bool = True) -> Path:
    """A NanoAOD-layout file: ``Events`` with ``nJet``, ``Jet_pt/eta/phi/mass``, ``genWeight``."""
    counts = np.asarray(cols["counts"])
    n = len(counts)
    tree: dict[str, Any] = {
        "Jet": ak.zip(
            {
                "pt": ak.unflatten(np.asarray(cols["pt"], dtype=np.float32), counts),
                "eta": ak.unflatten(np.asarray(cols["eta"], dtype=np.float32), counts),
                # NanoAOD's Jet behaviour needs phi and mass too
                "phi": ak.unflatten(np.zeros(int(counts.sum()), dtype=np.float32), counts),
                "mass": ak.unflatten(np.full(int(counts.sum()), 5.0, dtype=np.float32), counts),
            }
        ),
        "genWeight": np.asarray(cols["weight"], dtype=np.float32),
    }
    if ids:
        tree = {
            "run": np.ones(n, dtype=np.uint32),
            "luminosityBlock": np.ones(n, dtype=np.uint32),
            "event": np.arange(n, dtype=np.uint64),
            **tree,
        }
    with uproot.recreate(path) as f:  # a TTree (assigning a dict would write an RNTuple)
        f.mktree(
            "Events", {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in tree.items()}
        )
        f["Events"].extend(tree)
    return path


def compressed_baskets(path: Path, treename: str = "Events") -> dict[str, list[tuple[int, int]]]:
    """``{branch: [(first, stop) byte range of each compressed basket's payload]}``.

    Baskets stored uncompressed (payload as large as the data) are left out: ROOT has
    no checksum for them, so a flipped byte there is undetectable by any reader.
    """
    raw = path.read_bytes()
    tree = uproot.open(path)[treename]
    out: dict[str, list[tuple[int, int]]] = {}
    for name, branch in tree.items():
        for seek in branch.member("fBasketSeek")[: branch.num_baskets]:
            seek = int(seek)
            if seek == 0:
                continue  # a basket kept in the TTree object itself
            # TKey header: fNbytes (int32), fVersion (int16), fObjlen (int32),
            # fDatime (uint32), fKeylen (int16); the payload follows the key.
            nbytes, _, objlen, _, keylen = struct.unpack(">ihiIh", raw[seek : seek + 16])
            if nbytes - keylen < objlen:
                out.setdefault(name, []).append((seek + keylen, seek + nbytes))
    return out


def flip_byte(src: Path, dst: Path, position: int, mask: int = 0xFF) -> Path:
    data = bytearray(src.read_bytes())
    data[position] ^= mask
    dst.write_bytes(bytes(data))
    return dst


def truncate(src: Path, dst: Path, size: int) -> Path:
    dst.write_bytes(src.read_bytes()[:size])
    return dst


def evaluate(
    tmp_path: Path,
    datasets: Mapping[str, Mapping[str, Any]],
    *extra: str,
    config: Mapping[str, Any] | None = None,
    name: str = "config.yaml",
) -> tuple[int, dict[str, Any] | None]:
    """``evaluate`` through ``main``: ``(exit code, results.json or None)``."""
    data = analysis_config(datasets)
    data.update(config or {})
    path = write_config(tmp_path / name, data)
    out = tmp_path / f"out-{Path(name).stem}"
    results = out / "results.json"
    if results.exists():
        results.unlink()
    rc = main(["evaluate", str(path), "--output", str(out), "--quiet", *extra])
    return rc, (json.loads(results.read_text()) if results.exists() else None)


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The CLI's one-line error from captured stderr (:func:`tests.conftest.one_line_error`)."""
    return conftest_one_line_error(capsys.readouterr().err)
