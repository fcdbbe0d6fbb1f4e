"""Reverse mode on numba for event sums and indexed observables
(analysis.pipeline.backends.numba._revobs: the transposes of the event sums' and the
candidates' walks). On real files (ttbar 2015 and NanoAOD v12), with jets and b-jets (a
parent set), muons, a joint count, a trainable count threshold and learned scores: a
payload that reads HT's mean and variance (``sum(jets.pt)``) and ``count(bjets)`` up to
its kurtosis, the leading jet's pt with ``|eta|`` (comoments), the second b-jet's pt and
a dijet mass, or all of them: the numba pullback equals the JAX sweep (the reference;
1e-10) and central finite differences of the JAX kernel's pulled sum; the kernels'
derivatives equal exact enumeration of every object's patterns."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from analysis.pipeline import scorecols
from analysis.pipeline.backends.jax import reverse as jax_reverse
from analysis.pipeline.backends.numba import fastreverse
from analysis.pipeline.backends.numba.kernels import _numba_esum_vjp, _numba_lead
from analysis.pipeline.results import state_names
from tests.conftest import numba_refusal
from tests.pipeline.backends.numba.test_fastreverse_sets import (
    FILES,
    _setup,
    auto_equals_jax_sweep,
    observables_payload,
    sets_config,
    with_sets,
    zero_filled,
)

#: the observables this module adds (name -> its entry), by what they are
SUMS = {"ht": {"x": "sum(jets.pt)", "stats": ["mean", "std"]},
        "nb": {"x": "count(bjets)", "stats": ["mean", "std", "kurtosis"]}}
INDEXED = {"j0": {"x": "jets[0].pt", "y": "abs(jets[0].eta)", "stats": ["mean", "std", "corr"]},
           "b1": {"x": "bjets[1].pt", "stats": ["mean", "std"]},
           "mjj": {"x": "mass(jets[0] + jets[1])", "stats": ["mean"]}}


def with_observables(cfg: dict) -> dict:
    """``cfg`` with :data:`SUMS` and :data:`INDEXED` among its observables."""
    for name, entry in {**SUMS, **INDEXED}.items():
        cfg["observables"].append({"name": name, **entry})
    return cfg


def payload_reading(plan, names: set[str]) -> list:
    """:func:`observables_payload` for the states of ``names`` only (HT's anchor near
    its mean, its cotangents scaled by its deviations' size), ``None`` elsewhere."""
    out = []
    rng = np.random.default_rng(11)
    for n, e in zip(state_names(scorecols.bare(plan)), observables_payload(plan), strict=True):
        obs = n.split(".")[1] if n.startswith("observables.") else n
        if obs not in names:
            out.append(None)
        elif obs == "ht":
            out.append((np.float64(300.0), tuple(np.float64(rng.normal() / 100.0**r)
                                                 for r in range(5))))
        else:
            out.append(e)
    return out


def _compare(name: str, reads: set[str], fd: bool) -> None:
    plan, theta, widths, cols = _setup(with_observables(sets_config(btag=FILES[name])), name)
    payload = payload_reading(plan, reads)
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    got = fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
    payload = zero_filled(payload, observables_payload(plan))  # one JAX compile for every case
    ref = jax_reverse.chunk_pullback(cols, plan, theta, widths, payload)
    g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
    names = plan.trainable_names
    for n in ("jet_pt_min", "tag_min", "b_min", "n_min", "eta_max"):
        assert abs(r[names.index(n)]) > 0, n  # every kind of parameter is differentiated
    np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * np.abs(r).max())
    if not fd:
        return
    from analysis.stats.pullback import pulled_sum

    def loss(step: np.ndarray) -> float:
        st = jax_reverse.chunk_pullback(cols, plan, theta + step, widths, payload)
        return float(pulled_sum(st.derived.value, payload))

    idx = np.asarray(plan.trainable)
    v = np.random.default_rng(4).normal(size=len(names))
    v /= np.linalg.norm(v)
    for d, h in [(v, 1e-5)] + [(np.eye(len(names))[names.index(n)], 1e-5)
                               for n in ("b_min", "n_min")]:
        step = np.zeros_like(theta)
        step[idx] = h * d
        diff = (loss(step) - loss(-step)) / (2 * h)
        np.testing.assert_allclose(g @ d, diff, rtol=1e-6, atol=1e-9 * np.abs(g).max())


def test_event_sums_and_indexed_observables_equal_the_jax_sweep_and_differences() -> None:
    """Every state of the sums and indexed observables read (NanoAOD v12): = the JAX
    sweep (1e-10) and central differences along a random direction, the b-tag threshold
    and the trainable count threshold."""
    _compare("nano_tt_v12.root", set(SUMS) | set(INDEXED), fd=True)


@pytest.mark.slow  # ~20 s each under load: the JAX sweep's compile for each payload
@pytest.mark.parametrize("name,reads", [
    ("nano_tt_v12.root", set(SUMS)),
    ("nano_tt_v12.root", {"j0"}),
    ("nanoAOD_2015_CMS_Open_Data_ttbar.root", set(SUMS) | set(INDEXED) | {"jpt"}),
])
def test_each_kind_on_its_own(name: str, reads: set[str]) -> None:
    """HT's mean and variance with count(bjets)'s moments; the leading jet's pt and |eta|;
    all of them with a field observable, on the 2015 file (its b-tag CSVv2)."""
    _compare(name, reads, fd=False)


@pytest.mark.slow  # ~90 s under load: the JAX sweep's compile for each chunk's shape
def test_empty_and_tiny_chunks() -> None:
    """Chunks of 0, 1 and 3 events: = the JAX sweep."""
    from tests.chunked_helpers import slice_columns

    plan, theta, widths, cols = _setup(with_observables(sets_config()), "nano_tt_v12.root")
    payload = payload_reading(plan, set(SUMS) | set(INDEXED))
    for a, b in ((0, 0), (3, 4), (10, 13)):
        part = slice_columns(cols, a, b)
        got = fastreverse.chunk_pullback(part, plan, theta, widths, payload)
        ref = jax_reverse.chunk_pullback(part, plan, theta, widths, payload)
        g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * max(np.abs(r).max(), 1.0))


# --- the kernels against exact enumeration ---------------------------------------------

#: one collection, patterns (out, in s, in s and t) of two nested sets, counts 0..3 of s;
#: int8 as the tables' patterns (a kernel called with int64 compiles a version of its own)
PAT = np.array([[[0, 0], [1, 0], [1, 1]]], np.int8)  # (C, P, sets): pattern p holds set ls
N_STATES = 4


def _tables(rng):
    tgt = np.array([[[k for k in range(N_STATES)]] + [[min(k + 1, N_STATES - 1)
                                                       for k in range(N_STATES)]] * 2])
    f = np.array([0.0, 0.3, 1.0, 0.6])
    df = rng.normal(size=(N_STATES, 2))
    return tgt.astype(np.int64), f, df


def _events(rng, counts):
    coff = np.concatenate([[0], np.cumsum(counts)])[None, :].astype(np.int64)
    pv = rng.uniform(0.05, 1.0, size=(coff[0, -1], 3))
    pv /= pv.sum(axis=1, keepdims=True)
    pv[1] = [0.0, 1.0, 0.0]  # a certain object and a pattern of probability exactly 0
    return coff, pv


def _assignments(pv, lo, hi):
    """Every pattern assignment of objects ``lo:hi``: ``(patterns, probability)``."""
    for pats in itertools.product(range(pv.shape[1]), repeat=hi - lo):
        yield pats, math.prod(pv[lo + j, p] for j, p in enumerate(pats))


def _state(tgt, pats):
    k = 0
    for p in pats:
        k = tgt[0, p, k]
    return k


def test_event_sum_vjp_equals_enumeration() -> None:
    """``sums_vjp``'s ``dL/dpi`` and ``dL/df . df`` for ``L = sum_m c_m E[X^m 1_pass]``
    (``X`` the sum over set 0) against every pattern assignment (``L`` is multilinear in
    an object's pattern probabilities: ``dL/dpi_jp`` is ``L`` with object ``j`` in
    pattern ``p``)."""
    rng = np.random.default_rng(0)
    tgt, f, df = _tables(rng)
    counts = np.array([0, 3, 2, 4])
    coff, pv = _events(rng, counts)
    x = rng.uniform(10.0, 80.0, size=pv.shape[0])
    has = np.array([[[0.0, 1.0, 1.0]]])
    binom = np.array([[math.comb(r, i) for i in range(5)] for r in range(5)], np.float64)
    cm = rng.normal(size=(1, counts.size, 5)) / 40.0 ** np.arange(5)

    def loss(e, pv, x):
        lo, hi = coff[0, e], coff[0, e + 1]
        total = 0.0
        for pats, prob in _assignments(pv, lo, hi):
            big_x = sum(x[lo + j] * has[0, 0, p] for j, p in enumerate(pats))
            total += prob * f[_state(tgt, pats)] * sum(cm[0, e, m] * big_x**m for m in range(5))
        return total

    gp, dfs = np.zeros_like(pv), np.zeros((counts.size, 2))
    _numba_esum_vjp.sums_vjp(coff, np.array([0, pv.shape[0]]), pv, np.array([3]), tgt, f,
                             df, x[None, :], has, binom, cm, 4, 2, gp, dfs, 0, 2)
    for e in range(counts.size):
        for j in range(coff[0, e], coff[0, e + 1]):
            for p in range(3):
                at = pv.copy()
                at[j] = np.eye(3)[p]
                # a pattern of probability exactly 0 reads x = 0 (as the JAX reference)
                xj = x if pv[j, p] != 0 else np.where(np.arange(x.size) == j, 0.0, x)
                np.testing.assert_allclose(gp[j, p], loss(e, at, xj), rtol=1e-11, atol=1e-13)
        # dL/df[k]: the probability-weighted sum of c . X^m over the assignments ending in k
        dl_df = np.zeros(N_STATES)
        lo, hi = coff[0, e], coff[0, e + 1]
        for pats, prob in _assignments(pv, lo, hi):
            big_x = sum(x[lo + j] * has[0, 0, p] for j, p in enumerate(pats))
            dl_df[_state(tgt, pats)] += prob * sum(cm[0, e, m] * big_x**m for m in range(5))
        np.testing.assert_allclose(dfs[e], dl_df @ df, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("depth", [0, 1])
def test_candidates_vjp_equals_enumeration(depth: int) -> None:
    """``lead_vjp``'s ``dL/dpi`` and ``dL/df . df`` for ``L = sum_a wbar_a w(a)`` (the
    candidates of set 1 at ``depth``, in rank order) against every pattern assignment:
    ``w(a)`` sums the assignments whose first ``depth + 1`` members of the set are ``a``."""
    rng = np.random.default_rng(1)
    tgt, f, df = _tables(rng)
    counts = np.array([0, 1, 3, 2, 4])
    coff, pv = _events(rng, counts)
    n = pv.shape[0]
    order = np.arange(n)  # rank order: the flat order (each event's objects ranked)
    n_cand = counts.copy()  # every object can be in the set
    ls = 1
    off = np.concatenate([[0], np.cumsum([math.comb(int(k), depth + 1) for k in n_cand])])
    wbar = rng.normal(size=int(off[-1]))
    # the value kernel's weights (lanes: value in lane 0), for the candidates' order
    from analysis.select.lanes.arith import LANES

    pd = np.zeros((n, 3, LANES))
    df_l = np.zeros((N_STATES, LANES))
    w = np.zeros((int(off[-1]), LANES))
    obj = np.zeros((int(off[-1]), depth + 1), np.int64)
    _numba_lead.candidates(coff, np.array([0, n]), order, n_cand, 0, ls, depth, order, n_cand,
                           -1, 0, 0, pv, pd, PAT, np.array([3]), tgt, f, df_l, off, 2, w, obj, None,
                           None, None, 0, 3)

    def loss(e, pv):
        lo, hi = coff[0, e], coff[0, e + 1]
        tuples = {tuple(obj[q]): wbar[q] for q in range(off[e], off[e + 1])}
        total = 0.0
        for pats, prob in _assignments(pv, lo, hi):
            members = tuple(lo + j for j, p in enumerate(pats) if PAT[0, p, ls] == 1)
            if len(members) > depth:
                total += prob * f[_state(tgt, pats)] * tuples[members[: depth + 1]]
        return total

    gp, dfs = np.zeros_like(pv), np.zeros((counts.size, 2))
    _numba_lead.candidates(coff, np.array([0, n]), order, n_cand, 0, ls, depth, order, n_cand, -1,
                           0, 0, pv, 0.0, PAT, np.array([3]), tgt, f, df, off, 2, None, None,
                           wbar, gp, dfs, 0, 3)
    for e in range(counts.size):
        for j in range(coff[0, e], coff[0, e + 1]):
            for p in range(3):
                at = pv.copy()
                at[j] = np.eye(3)[p]
                np.testing.assert_allclose(gp[j, p], loss(e, at), rtol=1e-11, atol=1e-13)
        dl_df = np.zeros(N_STATES)
        lo, hi = coff[0, e], coff[0, e + 1]
        tuples = {tuple(obj[q]): wbar[q] for q in range(off[e], off[e + 1])}
        for pats, prob in _assignments(pv, lo, hi):
            members = tuple(lo + j for j, p in enumerate(pats) if PAT[0, p, ls] == 1)
            if len(members) > depth:
                dl_df[_state(tgt, pats)] += prob * tuples[members[: depth + 1]]
        np.testing.assert_allclose(dfs[e], dl_df @ df, rtol=1e-11, atol=1e-13)


@pytest.mark.slow  # ~60 s under load: two evaluators over two datasets, the JAX sweep's compile
def test_auto_runs_the_numba_pass_for_sums_and_leading_objects(monkeypatch) -> None:
    """Under ``auto``, an objective with targets on HT's mean and the leading jet's mean
    pT (a learned score beside two jet sets and muons) runs the numba passes and equals
    the JAX sweep's gradient (1e-10)."""
    from tests.optimize.test_score_reverse import _config

    data = with_sets(_config(100_000))
    data["observables"] += [{"name": "ht", **SUMS["ht"]}, {"name": "j0", "x": "jets[0].pt", "stats": ["mean"]}]
    data["objective"]["terms"] += [
        {"type": "target", "stat": "tt.ht.mean", "value": 300.0, "weight": 1e-5},
        {"type": "target", "stat": "tt.j0.mean", "value": 60.0, "weight": 1e-4}]
    auto_equals_jax_sweep(data, monkeypatch)


@pytest.mark.slow  # ~17 s under load: the JAX sweep's compile
def test_one_set_with_an_event_sum_and_a_leading_object_read() -> None:
    """One collection with one set (the chain's walk for the pass probability) and a
    payload that reads HT's moments and the leading jet's: = the JAX sweep (1e-10)."""
    from analysis.config.loader import config_from_dict
    from analysis.pipeline.plan import build_plan, initial_widths
    from tests.chunked_helpers import read_columns
    from tests.conftest import SHARED_DATA
    from tests.pipeline.test_score_kernel import config as score_config

    cfg = score_config(hidden=(3,))
    cfg["observables"].append({"name": "j0", "x": "jets[0].pt", "stats": ["mean", "std"]})
    config = config_from_dict(cfg)
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names], np.float64)
    widths = np.array(initial_widths(config), np.float64)
    cols = read_columns(SHARED_DATA / "nano_tt_v12.root", plan)
    assert fastreverse._tables(scorecols.bare(plan)).one_set
    payload = payload_reading(plan, {"ht", "j0", "selected_sumw"})
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    got = fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
    ref = jax_reverse.chunk_pullback(cols, plan, theta, widths, payload)
    g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
    assert np.abs(r).max() > 0
    np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * np.abs(r).max())
