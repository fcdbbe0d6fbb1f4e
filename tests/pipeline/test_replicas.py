"""Poisson-bootstrap replicas of the yields (analysis.pipeline.replicas).

Reference: for a sample of known weights the bootstrap standard deviation of the
selected sum of weights is ``sqrt(sum w^2)`` of the selected events (the Poisson
bootstrap's exact variance; here computed with uproot + numpy), within the precision
of a standard deviation estimated from K replicas, ``1 / sqrt(2 (K - 1))``. On every
backend (fixture ``backend``: the numba loops and the JAX backend's table), and the
numba loops term by term against the numpy ``(E, K)`` table.
"""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from analysis.driver.runner import Evaluator
from analysis.pipeline.backends.numba.bootstrap import NumbaCounter
from analysis.pipeline.backends.numba.kernels._numba_replicas import replica_lanes
from analysis.pipeline.split import _POISSON1_CDF, event_uniform, poisson_replicas
from tests import opt_helpers as H

CUTS = {"jet_pt_min": 25.0, "jet_abs_eta_max": 2.5, "btag_min": 0.1, "min_jets": 1}
K = 400


def _selected(small_data, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Each event's ``u`` (from its run, lumi and event numbers) and selected weight
    (its weight if it passes CUTS, else 0), from the files (uproot + awkward)."""
    parts = [uproot.open(p)["Events"].arrays(["Jet_pt", "Jet_eta", "Jet_btagDeepFlavB",
                                              "genWeight", "run", "luminosityBlock", "event"])
             for p in sorted((small_data / name).glob("*.root"))]
    a = ak.concatenate(parts)
    ok = ((a.Jet_pt > CUTS["jet_pt_min"]) & (abs(a.Jet_eta) < CUTS["jet_abs_eta_max"])
          & (a.Jet_btagDeepFlavB > CUTS["btag_min"]))
    sel = ak.to_numpy(ak.sum(ok, axis=1) >= CUTS["min_jets"])
    w = ak.to_numpy(a.genWeight).astype(np.float64)
    u = event_uniform(ak.to_numpy(a.run), ak.to_numpy(a.luminosityBlock), ak.to_numpy(a.event))
    return u, np.where(sel, w, 0.0)


def _selected_sumw2(small_data, name: str) -> float:
    """sum w^2 of the events passing CUTS, from the files (numpy)."""
    return float(np.sum(_selected(small_data, name)[1] ** 2))


def _replicas(small_data, backend, k=K, **executor):
    cfg = H.make_config(small_data, executor={"type": "iterative", **executor})
    with Evaluator(cfg, backend=backend) as ev:
        reps = ev.run_replicas(CUTS, widths=np.zeros(4), replicas=k)
        totals = ev.run_replica_totals(0.3, replicas=k)
    return reps, totals


@pytest.fixture(scope="module")
def reps(small_data, backend):
    return _replicas(small_data, backend)


def test_bootstrap_std_of_a_yield_is_sqrt_sumw2(small_data, reps):
    sums, _ = reps
    for name in ("ttbar", "dy"):
        s1 = sums[name].sums[0]
        ref = np.sqrt(_selected_sumw2(small_data, name))
        assert ref > 0
        rel = 1 / np.sqrt(2 * (K - 1))
        assert np.std(s1, ddof=1) == pytest.approx(ref, rel=3.5 * rel)
        # the nominal state of the same pass: sum w^2 as the files say
        st = sums[name].state
        assert float(st.derived.value["selected_sumw2"]) == pytest.approx(ref**2, rel=1e-12)


def test_every_replica_is_the_table_of_the_files_events(small_data, reps):
    """Each replica's selected sums are ``sum_e P_ek s_e`` and ``sum_e P_ek s_e^2`` with
    ``P_ek`` the numpy table of the events' numbers and ``s_e`` from the files."""
    sums, _ = reps
    for name in ("ttbar", "dy"):
        u, s = _selected(small_data, name)
        p = poisson_replicas(u, K).astype(np.float64)
        np.testing.assert_allclose(sums[name].sums, np.stack([p.T @ s, p.T @ (s * s)]),
                                   rtol=1e-12, atol=0)


@pytest.mark.parametrize("executor", [
    {"chunksize": 700},
    pytest.param({"type": "futures", "workers": 2}, marks=pytest.mark.slow),  # processes
])
def test_replicas_are_the_same_on_every_chunking_and_executor(small_data, reps, executor,
                                                              backend):
    other = _replicas(small_data, backend, **executor)
    for a, b in zip(reps, other):
        for name in ("ttbar", "dy"):
            assert b[name].sums == pytest.approx(a[name].sums, rel=1e-10)


def test_numba_sums_match_the_replica_table():
    n = 5000
    rng = np.random.default_rng(3)
    u = event_uniform(np.ones(n), np.arange(n) // 100, np.arange(n) + 1)
    w = rng.normal(1.0, 0.3, n)
    s = np.where(rng.random(n) < 0.4, w, 0.0)
    p = poisson_replicas(u, 20).astype(np.float64)
    assert p.mean() == pytest.approx(1.0, abs=0.02) and p.var() == pytest.approx(1.0, abs=0.03)
    sel = NumbaCounter().selected(u, s, 20)
    assert sel[0] == pytest.approx(p.T @ s, rel=1e-12)
    assert sel[1] == pytest.approx(p.T @ (s * s), rel=1e-12)
    tot = NumbaCounter().totals(u, np.stack([w, 2 * w]), 20)
    assert tot[0] == pytest.approx(p.sum(axis=0), rel=1e-12)
    assert tot[2] == pytest.approx(2 * (p.T @ w), rel=1e-12)


def test_lanes_loop_matches_the_replica_table():
    """Every lane's sums and the totals of the one-loop kernel, against the (E, K) table."""
    n = 5000
    rng = np.random.default_rng(4)
    u = event_uniform(np.ones(n), np.arange(n) // 100, np.arange(n) + 1)
    w = rng.normal(1.0, 0.3, n)
    lanes = np.stack([np.where(rng.random(n) < q, w, 0.0) for q in (0.0, 0.2, 0.7)])
    p = poisson_replicas(u, 20).astype(np.float64)
    for weights in (None, np.stack([w, 3 * w])):
        sums, tot = replica_lanes(u, lanes, 20, weights, cdf=_POISSON1_CDF)
        for j, s in enumerate(lanes):
            assert sums[j, 0] == pytest.approx(p.T @ s, rel=1e-12, abs=0)
            assert sums[j, 1] == pytest.approx(p.T @ (s * s), rel=1e-12, abs=0)
        if weights is None:
            assert tot is None
        else:
            assert tot[0] == pytest.approx(p.sum(axis=0), rel=1e-12)
            assert tot[2] == pytest.approx(3 * (p.T @ w), rel=1e-12)


def test_a_lanes_pass_without_replicas_computes_the_states_alone():
    """``count`` 0 (keep-best's values pass): every (point, part) state as with
    replicas, and neither the selected weights nor the counter run."""
    from analysis.pipeline.layout import ChunkColumns
    from analysis.pipeline.replicas import chunk_lanes
    from analysis.pipeline.split import part_factor

    n = 2000
    rng = np.random.default_rng(5)
    cols = ChunkColumns(n, rng.normal(1.0, 0.3, n),
                        uid=event_uniform(np.ones(n), np.arange(n) // 100, np.arange(n) + 1))
    calls = {"selected": 0, "counter": 0}

    def point(q):  # a "state": the weights' sum above a threshold of the uid
        def selected(c):
            calls["selected"] += 1
            return np.where(c.uid > q, c.weight, 0.0)
        return (lambda c: float(np.sum(c.weight[c.uid > q]))), selected

    class Counting(NumbaCounter):
        def lanes(self, *args):
            calls["counter"] += 1
            return super().lanes(*args)

    points, parts = [point(0.2), point(0.6)], ("all", "train", "held_out")
    bare = chunk_lanes(cols, points, 0, Counting(), parts=parts, fraction=0.3)
    assert calls == {"selected": 0, "counter": 0}
    full = chunk_lanes(cols, points, 2, Counting(), parts=parts, fraction=0.3)
    assert calls == {"selected": 2, "counter": 1}
    assert bare.lanes.keys() == full.lanes.keys() and bare.totals is None
    for key, lane in bare.lanes.items():
        assert lane.state == full.lanes[key].state and lane.sums.shape == (2, 0)
    q, part = 0.6, "held_out"  # a part's state: the part's weights
    assert bare.lanes[1, part].state == float(np.sum(
        (cols.weight * part_factor(cols.uid, part, 0.3))[cols.uid > q]))
    # lanes whose state the caller has (known): not computed, the same sums
    known = frozenset({(0, "all"), (1, "train")})
    calls.update(selected=0, counter=0)
    some = chunk_lanes(cols, points, 2, Counting(), parts=parts, fraction=0.3, known=known)
    assert calls == {"selected": 2, "counter": 1}
    for key, lane in some.lanes.items():
        assert lane.state == (None if key in known else full.lanes[key].state)
        np.testing.assert_array_equal(lane.sums, full.lanes[key].sums)
