"""Hand-written processors (processors/jet_moments.py, processors/dimuon.py) on real NanoAOD.

At width 0 (hard cuts) their merged states give the statistics of an independent
awkward + vector selection to 1e-12; with soft cuts the per-chunk gradients pass
:func:`analysis.testing.assert_chunk_gradients` and the outputs are invariant under
splitting a chunk (:func:`analysis.testing.assert_chunk_invariance`).
"""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import vector

from analysis import stats
from analysis.testing import assert_chunk_gradients, assert_chunk_invariance
from processors import DiffProcessor, DimuonProcessor, JetMomentsProcessor
from tests.chunked_helpers import analysis_config, read_events

TTBAR = "nanoAOD_2015_CMS_Open_Data_ttbar.root"
DY = "nano_dy.root"


@pytest.fixture(scope="module")
def ttbar(shared_data):
    events = read_events(shared_data / TTBAR)
    events.metadata["dataset"] = "ttbar"
    return events


@pytest.fixture(scope="module")
def dy(shared_data):
    events = read_events(shared_data / DY)
    events.metadata["dataset"] = "dy"
    return events


def _moments_reference(x: np.ndarray) -> dict[str, float]:
    """Unweighted float64 statistics, corrected two-pass (scipy's biased skew/kurtosis)."""
    d = x - x.mean()
    mean = x.mean() + d.mean()
    e = x - mean
    m2, m3, m4 = (e**2).mean(), (e**3).mean(), (e**4).mean()
    return {"mean": mean, "var": m2, "skew": m3 / m2**1.5, "kurtosis": m4 / m2**2 - 3.0}


def _assert_moments(state, x: np.ndarray) -> None:
    want = _moments_reference(np.asarray(x, dtype=np.float64))
    assert float(state.sumw) == len(x)
    for name, value in want.items():
        got = float(getattr(stats, name)(state))
        assert got == pytest.approx(value, rel=1e-12, abs=1e-12 * abs(want["mean"])), name


def test_jet_moments_match_awkward_hard_cuts(ttbar) -> None:
    proc = JetMomentsProcessor(widths={"jet_pt_min": 0.0, "jet_abs_eta_max": 0.0})
    d = proc.process(ttbar)["ttbar"]
    jets = ttbar.Jet
    good = jets[(jets.pt > 30.0) & (abs(jets.eta) < 2.4)]
    selected = ak.num(good) >= 2
    assert 0 < ak.sum(selected) < len(ttbar)
    _assert_moments(d.value["jet_pt"], ak.to_numpy(ak.flatten(good.pt[selected])))
    _assert_moments(
        d.value["ht"], ak.to_numpy(ak.sum(ak.values_astype(good.pt, np.float64), axis=1)[selected])
    )
    assert float(d.value["selected"]) == ak.sum(selected)
    assert float(d.value["events"]) == len(ttbar)
    _, grad = d.value_and_grad(lambda s: stats.mean(s["jet_pt"]))
    assert all(v == 0.0 for v in grad.values())  # hard cuts have zero gradient


def test_dimuon_mass_matches_awkward_vector_hard_cuts(dy) -> None:
    widths = {"mu_pt_min": 0.0, "mu_abs_eta_max": 0.0, "mu_iso_max": 0.0}
    proc = DimuonProcessor({"mu_pt_min": 10.0}, widths=widths)
    d = proc.process(dy)["dy"]
    mu = dy.Muon
    good = mu[(mu.pt > 10.0) & (abs(mu.eta) < 2.4) & (mu.pfRelIso04_all < 0.15)]
    p4 = vector.zip(
        {k: ak.values_astype(good[k], np.float64) for k in ("pt", "eta", "phi", "mass")}
    )
    a, b = ak.unzip(ak.combinations(p4, 2))
    qa, qb = ak.unzip(ak.combinations(good.charge, 2))
    mass = (a + b).mass
    keep = (qa != qb) & (mass > 60.0) & (mass < 120.0)
    masses = ak.to_numpy(ak.flatten(mass[keep]))
    assert len(masses) >= 3
    _assert_moments(d.value["mass"], masses)
    assert float(d.value["pairs"]) == len(masses)


def test_dimuon_chunk_function_is_compiled(dy) -> None:
    """The dimuon chunk function is Jagged arithmetic over pairs: stats.derive compiles
    it (its arrays as arguments, no traced fallback), and a second chunk of other
    events in the same buckets reuses the program."""
    import warnings

    from analysis.stats import _compiled
    from analysis.stats._closure import closure_inputs

    proc = DimuonProcessor({"mu_pt_min": 10.0})
    fns = [proc.chunk_function(dy[:20]), proc.chunk_function(dy[20:])]
    assert all(closure_inputs(fn) is not None for fn in fns)
    refused = set(_compiled._REFUSED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        before = _compiled.BUILT["programs"]
        stats.derive(fns[0], proc.theta)
        built = _compiled.BUILT["programs"]
        stats.derive(fns[1], proc.theta)
    assert _compiled._REFUSED == refused
    assert built - before <= 1 and _compiled.BUILT["programs"] == built


def test_jet_moments_pass_compiles_a_bounded_number_of_times(shared_data) -> None:
    """A Runner pass of JetMomentsProcessor in 8 chunks compiles at most 3 programs (its
    chunk function closes over arrays only: the chunk's arrays are arguments), a second
    pass none (the kept columns, the same programs); and the merged output equals the
    whole file's."""
    import warnings

    from coffea import processor
    from coffea.nanoevents import NanoAODSchema

    from analysis.data import owncache
    from analysis.stats import _compiled
    from analysis.stats._closure import closure_inputs

    proc = JetMomentsProcessor()
    events = read_events(shared_data / TTBAR)
    assert closure_inputs(proc.chunk_function(events[:25])) is not None
    runner = processor.Runner(executor=processor.IterativeExecutor(status=False),
                              schema=NanoAODSchema, chunksize=25)
    fileset = {"ttbar": [str(shared_data / TTBAR)]}
    owncache.clear_cache()
    _compiled._PROGRAMS.clear()

    def programs() -> int:
        return _compiled.BUILT["programs"]

    before = programs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # coffea's own
        out = runner(fileset, proc, treename="Events")["ttbar"]
        first = programs() - before
        again = runner(fileset, proc, treename="Events")["ttbar"]
    assert 1 <= first <= 3, first
    assert programs() - before == first
    assert owncache.cache_info()["hits"] == 8
    events.metadata["dataset"] = "ttbar"
    whole = proc.process(events)["ttbar"]
    for a, b in ((out, whole), (again, out)):
        assert float(stats.mean(a.value["ht"])) == pytest.approx(
            float(stats.mean(b.value["ht"])), rel=1e-12)
        np.testing.assert_allclose(a.jac["jet_pt"].m2, b.jac["jet_pt"].m2, rtol=1e-10)


@pytest.mark.slow
def test_chunk_gradients_of_both_processors(ttbar, dy) -> None:
    jets = JetMomentsProcessor()
    assert_chunk_gradients(jets.chunk_function(ttbar[:50]), jets.theta, rtol=1e-5)
    muons = DimuonProcessor({"mu_pt_min": 10.0})
    assert_chunk_gradients(muons.chunk_function(dy), muons.theta, rtol=1e-5)


@pytest.mark.slow
def test_chunk_invariance_of_both_processors(ttbar, dy) -> None:
    assert_chunk_invariance(JetMomentsProcessor(order=2), ttbar[:60], splits=(2,))
    assert_chunk_invariance(DimuonProcessor({"mu_pt_min": 10.0}), dy, splits=(2,))


@pytest.mark.slow
def test_chunk_invariance_of_the_yaml_pipeline_processor(ttbar) -> None:
    from analysis.config.loader import config_from_dict
    from analysis.pipeline.job import Job
    from analysis.pipeline.plan import build_plan, initial_widths
    from analysis.pipeline.request import Request
    config = config_from_dict(analysis_config())
    plan = build_plan(config)
    theta = [config.parameters[name].init for name in plan.param_names]
    proc = DiffProcessor(Job(plan, Request(theta, initial_widths(config), order=2),
                             {"ttbar": "genWeight"}))
    assert_chunk_invariance(proc, ttbar[:60], splits=(2,))
