"""Tests of the toy NanoAOD generator ``analysis.data.generate``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot

from analysis.data.generate import (
    GENERATOR_VERSION,
    PROCESSES,
    ensure_dataset,
    generate_events,
    manifest_path,
    split_events,
    write_dataset,
)
from tests.conftest import SHARED_DATA

# Reference file per process; see the module docstring of analysis.data.generate for why the
# 2015 Open Data ttbar file (btagDeepFlavB = -3000 placeholders) is not used.
REFERENCE = {"ttbar": "nano_tt_v12.root", "dy": "nano_dy.root"}
BTAG_CUT = 0.3  # btagDeepFlavB working point (unitless)
N_STAT = 20_000  # events (count) where statistics matter

BRANCHES = [
    "nJet",
    "Jet_pt",
    "Jet_eta",
    "Jet_phi",
    "Jet_mass",
    "Jet_btagDeepFlavB",
    "Jet_hadronFlavour",
    "MET_pt",
    "MET_phi",
    "genWeight",
    "run",
    "luminosityBlock",
    "event",
]


def _read(path: Path) -> ak.Array:
    """All generated branches of ``path``'s ``Events`` tree."""
    with uproot.open(path) as f:
        return f["Events"].arrays(BRANCHES)


def _summary(n_jet: np.ndarray, jet_pt: np.ndarray, btag: np.ndarray) -> dict[str, float]:
    """Mean jets per event (count), mean jet pT [GeV], fraction of b-tagged jets."""
    return {
        "mean_njet": float(np.mean(n_jet)),
        "mean_pt": float(np.mean(jet_pt)),
        "frac_btag": float(np.mean(btag > BTAG_CUT)),
    }


# --------------------------------------------------------------------------- content


@pytest.mark.parametrize("process", PROCESSES)
def test_layout_dtypes_and_physics_ranges(process: str) -> None:
    ev = generate_events(process, 2_000, seed=5)
    jets = ev["Jet"]
    assert len(jets) == 2_000
    for field in ("pt", "eta", "phi", "mass", "btagDeepFlavB"):
        assert ak.to_numpy(ak.flatten(jets[field])).dtype == np.float32
    for key in ("MET_pt", "MET_phi", "genWeight"):
        assert ev[key].dtype == np.float32
    assert ev["run"].dtype == np.uint32
    assert ev["luminosityBlock"].dtype == np.uint32
    assert ev["event"].dtype == np.uint64

    pt = ak.to_numpy(ak.flatten(jets.pt))
    assert pt.min() >= 15.0
    assert np.abs(ak.to_numpy(ak.flatten(jets.eta))).max() < 4.7
    assert np.abs(ak.to_numpy(ak.flatten(jets.phi))).max() <= np.float32(np.pi)
    btag = ak.to_numpy(ak.flatten(jets.btagDeepFlavB))
    assert btag.min() >= 0.0 and btag.max() <= 1.0
    assert ak.all(jets.mass > 0)
    # sorted by descending pT within each event
    assert ak.all(jets.pt[:, 1:] <= jets.pt[:, :-1])
    assert np.all(ev["genWeight"] > 0)
    assert abs(float(np.mean(ev["genWeight"])) - 1.0) < 0.02
    np.testing.assert_array_equal(ev["event"], np.arange(1, 2_001, dtype=np.uint64))


def test_ttbar_vs_dy_qualitative() -> None:
    tt = generate_events("ttbar", 5_000, seed=1)["Jet"]
    dy = generate_events("dy", 5_000, seed=1)["Jet"]
    assert ak.mean(ak.num(tt)) > ak.mean(ak.num(dy))
    assert ak.mean(ak.flatten(tt.pt)) > ak.mean(ak.flatten(dy.pt))
    n_b_tt = ak.mean(ak.sum(tt.hadronFlavour == 5, axis=1))
    n_b_dy = ak.mean(ak.sum(dy.hadronFlavour == 5, axis=1))
    assert 1.7 < n_b_tt < 2.3
    assert n_b_dy < 0.1
    # b-jets peaked near 1, light jets near 0
    central = abs(tt.eta) < 2.5
    assert (
        np.median(ak.to_numpy(ak.flatten(tt.btagDeepFlavB[central & (tt.hadronFlavour == 5)])))
        > 0.8
    )
    assert np.median(ak.to_numpy(ak.flatten(tt.btagDeepFlavB[tt.hadronFlavour == 0]))) < 0.05


def test_unknown_process_and_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        generate_events("wjets", 10, seed=0)
    with pytest.raises(ValueError):
        generate_events("ttbar", -1, seed=0)
    with pytest.raises(ValueError):
        generate_events("ttbar", 10, seed=-1)
    with pytest.raises(ValueError):
        write_dataset(tmp_path, process="ttbar", n_events=10, n_files=0)


# ----------------------------------------------------------------------- determinism


@pytest.mark.parametrize("process", PROCESSES)
def test_generate_deterministic(process: str) -> None:
    a = generate_events(process, 3_000, seed=42)
    b = generate_events(process, 3_000, seed=42)
    c = generate_events(process, 3_000, seed=43)
    assert a.keys() == b.keys()
    for key in a:
        assert ak.array_equal(a[key], b[key]), key
    assert not ak.array_equal(a["Jet"], c["Jet"])
    assert not np.array_equal(a["MET_pt"], c["MET_pt"])


def test_files_deterministic(tmp_path: Path) -> None:
    p1 = write_dataset(tmp_path / "a", process="ttbar", n_events=4_000, n_files=2, seed=7)
    p2 = write_dataset(tmp_path / "b", process="ttbar", n_events=4_000, n_files=2, seed=7)
    p3 = write_dataset(tmp_path / "c", process="ttbar", n_events=4_000, n_files=2, seed=8)
    for x, y, z in zip(p1, p2, p3, strict=True):
        ax, ay, az = _read(x), _read(y), _read(z)
        for name in BRANCHES:
            assert ak.array_equal(ax[name], ay[name]), name
        assert not ak.array_equal(ax["Jet_pt"], az["Jet_pt"])
        # files differ at most in the 4-byte ROOT TDatime stamps (file, dir, keys)
        assert x.stat().st_size == y.stat().st_size
        bx, by = x.read_bytes(), y.read_bytes()
        assert sum(u != v for u, v in zip(bx, by, strict=True)) <= 256
    # generate_events equals file 0 of a one-file dataset
    (single,) = write_dataset(tmp_path / "d", process="dy", n_events=1_500, seed=3)
    ev = generate_events("dy", 1_500, seed=3)
    arr = _read(single)
    assert ak.array_equal(arr["Jet_pt"], ev["Jet"].pt)
    assert ak.array_equal(arr["Jet_btagDeepFlavB"], ev["Jet"].btagDeepFlavB)
    assert np.array_equal(ak.to_numpy(arr["genWeight"]), ev["genWeight"])


def test_file_content_depends_only_on_file_index(tmp_path: Path) -> None:
    # file 1 of a 3-file dataset with 3*500 events == file 1 of a 2-file dataset with
    # 2*500 events, apart from the event numbering
    p3 = write_dataset(tmp_path / "three", process="ttbar", n_events=1_500, n_files=3, seed=1)
    p2 = write_dataset(tmp_path / "two", process="ttbar", n_events=1_000, n_files=2, seed=1)
    a, b = _read(p3[1]), _read(p2[1])
    assert ak.array_equal(a["Jet_pt"], b["Jet_pt"])
    assert ak.array_equal(a["event"], b["event"])  # same offset (500) in both
    assert not ak.array_equal(_read(p3[0])["Jet_pt"], a["Jet_pt"])


# ------------------------------------------------------------------- files and split


def test_split_and_unique_event_numbers(tmp_path: Path) -> None:
    assert split_events(10, 3) == [4, 3, 3]
    assert split_events(2, 4) == [1, 1, 0, 0]
    paths = write_dataset(tmp_path, process="dy", n_events=1_003, n_files=4, seed=0)
    assert [p.name for p in paths] == [f"dy_{i:03d}.root" for i in range(4)]
    sizes, events = [], []
    for p in paths:
        arr = _read(p)
        sizes.append(len(arr))
        events.append(ak.to_numpy(arr["event"]))
        assert ak.all(arr["nJet"] == ak.num(arr["Jet_pt"]))
    assert sizes == [251, 251, 251, 250]
    all_events = np.concatenate(events)
    assert len(np.unique(all_events)) == 1_003
    np.testing.assert_array_equal(np.sort(all_events), np.arange(1, 1_004))


def test_branch_types_on_disk(tmp_path: Path) -> None:
    (path,) = write_dataset(tmp_path, process="ttbar", n_events=100, seed=0)
    with uproot.open(path) as f:
        tree = f["Events"]
        assert isinstance(tree, uproot.TTree)
        assert set(BRANCHES) <= set(tree.keys())
        expected = {
            "nJet": ">i4",
            "Jet_pt": ">f4",
            "Jet_eta": ">f4",
            "Jet_phi": ">f4",
            "Jet_mass": ">f4",
            "Jet_btagDeepFlavB": ">f4",
            "MET_pt": ">f4",
            "MET_phi": ">f4",
            "genWeight": ">f4",
            "run": ">u4",
            "luminosityBlock": ">u4",
            "event": ">u8",
        }
        for name, dtype in expected.items():
            interp = tree[name].interpretation
            inner = getattr(interp, "content", interp)
            assert inner.from_dtype == np.dtype(dtype), name


def test_zero_events(tmp_path: Path) -> None:
    (path,) = write_dataset(tmp_path, process="dy", n_events=0, seed=0)
    assert len(_read(path)) == 0


# --------------------------------------------------------------------------- coffea


# the toy files have no Muon/Electron/... collections, hence no cross-reference indices
@pytest.mark.filterwarnings("ignore:Missing cross-reference index")
def test_readable_by_nanoevents(tmp_path: Path) -> None:
    from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

    (path,) = write_dataset(tmp_path, process="ttbar", n_events=500, seed=2)
    events = NanoEventsFactory.from_root(
        {str(path): "Events"}, schemaclass=NanoAODSchema, mode="eager"
    ).events()
    ev = generate_events("ttbar", 500, seed=2)
    assert len(events) == 500
    for field in ("pt", "eta", "phi", "mass", "btagDeepFlavB", "hadronFlavour"):
        assert ak.array_equal(events.Jet[field], ev["Jet"][field], check_parameters=False)
    np.testing.assert_array_equal(ak.to_numpy(events.genWeight), ev["genWeight"])
    np.testing.assert_array_equal(ak.to_numpy(events.MET.pt), ev["MET_pt"])
    # four-vector behaviour from the schema
    assert ak.all(events.Jet.mass >= 0)
    assert ak.all(abs(events.Jet.pz) >= 0)


@pytest.mark.filterwarnings("ignore:Missing cross-reference index")
def test_runner_with_nanoaod_schema(tmp_path: Path) -> None:
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema

    paths = write_dataset(tmp_path, process="dy", n_events=3_000, n_files=2, seed=4)

    class Counter(processor.ProcessorABC):
        def process(self, events):
            return {
                "n": len(events),
                "sumw": float(ak.sum(events.genWeight)),
                "njet": int(ak.sum(ak.num(events.Jet.pt))),
                "nbtag": int(ak.sum(events.Jet.btagDeepFlavB > BTAG_CUT)),
            }

        def postprocess(self, accumulator):
            return accumulator

    runner = processor.Runner(
        executor=processor.IterativeExecutor(), schema=NanoAODSchema, chunksize=1_000
    )
    out = runner({"dy": {"files": {str(p): "Events" for p in paths}}}, Counter())
    expected = [_read(p) for p in paths]
    assert out["n"] == 3_000
    assert out["njet"] == sum(int(ak.sum(a["nJet"])) for a in expected)
    assert out["nbtag"] == sum(int(ak.sum(a["Jet_btagDeepFlavB"] > BTAG_CUT)) for a in expected)
    sumw = sum(float(np.sum(ak.to_numpy(a["genWeight"]), dtype=np.float64)) for a in expected)
    assert out["sumw"] == pytest.approx(sumw, rel=1e-5)


# ------------------------------------------------------------ resemblance to real files


@pytest.mark.parametrize("process", PROCESSES)
def test_resembles_real_nanoaod(process: str) -> None:
    ref = SHARED_DATA / REFERENCE[process]
    if not ref.is_file():
        pytest.skip(f"reference file {ref} not available")
    with uproot.open(ref) as f:
        real = f["Events"].arrays(["nJet", "Jet_pt", "Jet_btagDeepFlavB"])
    real_s = _summary(
        ak.to_numpy(real["nJet"]),
        ak.to_numpy(ak.flatten(real["Jet_pt"])),
        ak.to_numpy(ak.flatten(real["Jet_btagDeepFlavB"])),
    )
    jets = generate_events(process, N_STAT, seed=11)["Jet"]
    gen_s = _summary(
        ak.to_numpy(ak.num(jets)),
        ak.to_numpy(ak.flatten(jets.pt)),
        ak.to_numpy(ak.flatten(jets.btagDeepFlavB)),
    )
    for key, value in real_s.items():
        assert gen_s[key] == pytest.approx(value, rel=0.15), (key, gen_s, real_s)


# ------------------------------------------------------------------- ensure_dataset


def test_ensure_dataset_caches_and_rewrites(tmp_path: Path) -> None:
    paths = ensure_dataset(tmp_path, process="ttbar", n_events=600, n_files=3, seed=1)
    assert [p.name for p in paths] == ["ttbar_000.root", "ttbar_001.root", "ttbar_002.root"]
    manifest = json.loads(manifest_path(tmp_path, "ttbar").read_text())
    assert manifest["process"] == "ttbar"
    assert (manifest["n_events"], manifest["n_files"], manifest["seed"]) == (600, 3, 1)
    assert manifest["version"] == GENERATOR_VERSION

    # push mtimes into the past so any rewrite is visible regardless of clock resolution
    old = time.time() - 1_000
    for p in paths:
        os.utime(p, (old, old))
    mtimes = [p.stat().st_mtime_ns for p in paths]

    again = ensure_dataset(tmp_path, process="ttbar", n_events=600, n_files=3, seed=1)
    assert again == paths
    assert [p.stat().st_mtime_ns for p in paths] == mtimes

    # different seed -> rewritten, different content
    before = _read(paths[0])["Jet_pt"]
    ensure_dataset(tmp_path, process="ttbar", n_events=600, n_files=3, seed=2)
    assert all(p.stat().st_mtime_ns != m for p, m in zip(paths, mtimes, strict=True))
    assert not ak.array_equal(_read(paths[0])["Jet_pt"], before)
    assert json.loads(manifest_path(tmp_path, "ttbar").read_text())["seed"] == 2

    # fewer files -> rewritten, stale files removed
    fewer = ensure_dataset(tmp_path, process="ttbar", n_events=600, n_files=2, seed=2)
    assert sorted(p.name for p in tmp_path.glob("ttbar_*.root")) == [p.name for p in fewer]
    assert sum(len(_read(p)) for p in fewer) == 600

    # a missing file triggers a rewrite
    fewer[1].unlink()
    ensure_dataset(tmp_path, process="ttbar", n_events=600, n_files=2, seed=2)
    assert fewer[1].is_file()

    # another process in the same directory has its own manifest and files
    dy = ensure_dataset(tmp_path, process="dy", n_events=100, seed=2)
    assert dy[0].name == "dy_000.root" and all(p.is_file() for p in fewer)
    # no temporary files left behind
    assert not list(tmp_path.glob(".*.tmp"))


def test_ensure_dataset_rewrites_on_corrupt_manifest(tmp_path: Path) -> None:
    (path,) = ensure_dataset(tmp_path, process="dy", n_events=100, seed=0)
    manifest_path(tmp_path, "dy").write_text("{not json")
    old = time.time() - 1_000
    os.utime(path, (old, old))
    mtime = path.stat().st_mtime_ns
    ensure_dataset(tmp_path, process="dy", n_events=100, seed=0)
    assert path.stat().st_mtime_ns != mtime
    assert json.loads(manifest_path(tmp_path, "dy").read_text())["n_events"] == 100


def test_mean_jets_gives_a_poisson_multiplicity() -> None:
    n = 40_000
    counts = np.asarray(ak.num(generate_events("ttbar", n, seed=5, mean_jets=5.5)["Jet"]))
    # Poisson(5.5): mean and variance 5.5 (5 sigma of the estimates: ~0.06 and ~0.2)
    assert abs(counts.mean() - 5.5) < 0.06 and abs(counts.var() - 5.5) < 0.2
    assert np.array_equal(np.bincount(counts)[:2] > 0, [True, True])  # 0 and 1 jet occur
    same = np.asarray(ak.num(generate_events("ttbar", n, seed=5)["Jet"]))
    assert abs(same.mean() - 7.5) < 0.1  # the process's own multiplicity without it
    with pytest.raises(ValueError, match="mean_jets"):
        generate_events("ttbar", 10, seed=5, mean_jets=-1.0)
