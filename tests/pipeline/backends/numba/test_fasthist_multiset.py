"""Expressions over two indexed sets of two collections on numba
(analysis.pipeline.backends.numba.kernels._numba_lead with a second set): ``mass(jets[0] +
muons[0])`` (hard bins; an indexed observable; a likelihood template in a channel region
with a shift of the jets' pT and a weight variation), ``mass(electrons[0] + muons[0])``
(soft bins, trainable edges), ``deltaR(jets[1], muons[0])`` and ``pt(muons[0] + muons[1] +
jets[0])`` (the outer set indexed beyond its first member, first in the expression), on real files (ttbar 2015 and
NanoAOD v12). The states and Jacobians equal the JAX kernel's (1e-12,
analysis.pipeline.backends.jax.histkernel over analysis.select.leading, itself checked
against enumeration); what stays on the JAX kernel is refused in one line."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.jax import passes as kernel
from analysis.pipeline.backends.numba import _fastleading, fastkernel
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_lead
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.select.lanes.arith import LANES
from tests.chunked_helpers import NANOAOD_WARNINGS, read_columns, slice_columns
from tests.conftest import SHARED_DATA, numba_refusal
from tests.pipeline.backends.numba.test_fasthist import assert_trees_close
from tests.pipeline.backends.numba.test_fasthist_multislot import multi_config
from tests.pipeline.backends.numba.test_fasthist_multislot import setup as multislot_setup
from tests.pipeline.backends.numba.test_fastreverse_hists import (
    check,
    hists_payload,
    state_paths,
)

pytestmark = NANOAOD_WARNINGS
FILES = ("nano_tt_v12.root", "nanoAOD_2015_CMS_Open_Data_ttbar.root")
HISTS = [
    {"name": "mlb", "x": "mass(jets[0] + muons[0])",
     "edges": [0.0, 50.0, 100.0, 200.0, 400.0, 800.0]},
    {"name": "mem", "x": "mass(electrons[0] + muons[0])",
     "bins": {"n": 4, "lo": 0.0, "hi": 200.0}, "width": 5.0, "trainable_edges": True},
    {"name": "drjm", "x": "deltaR(jets[1], muons[0])", "bins": {"n": 4, "lo": 0.0, "hi": 4.0},
     "width": 0.2},
    {"name": "ptmmj", "x": "pt(muons[0] + muons[1] + jets[0])",
     "edges": [0.0, 50.0, 100.0, 200.0, 400.0]},
]


def config(*, width: float = 1.0, likelihood: bool = True) -> dict:
    """:func:`tests.pipeline.backends.numba.test_fasthist_multislot.multi_config`'s sets
    (jets, b-jets, muons, a joint count of b-jets and muons) with electrons (a trainable pT
    threshold), the histograms :data:`HISTS`, the jet-muon mass as an observable and,
    with ``likelihood``, as a channel's template in a region (one b-jet or more)."""
    cfg = multi_config(width=width, likelihood=likelihood)
    cfg["parameters"]["el"] = {"init": 12.0, "bounds": [0.0, 50.0]}
    cfg["objects"]["electrons"] = {"collection": "Electron", "cuts": [
        {"var": "pt", "op": ">", "param": "el", "width": 2.0 * width}]}
    cfg["observables"] = [{"name": "m", "x": "mass(jets[0] + muons[0])", "stats": ["mean"]},
                          {"name": "pt", "x": "jets.pt", "stats": ["mean"]}]
    cfg["histograms"] = copy.deepcopy(HISTS)
    if likelihood:
        cfg["likelihood"] = {"channels": {"mlb": {"histogram": "mlb", "selection": [
            {"count": "bjets", "op": ">=", "value": 1}]}}}
    return cfg


def setup(name: str = FILES[0], **kw):
    """``(plan, theta, widths, columns)`` of :func:`config` on the shared file ``name``
    (:func:`tests.pipeline.backends.numba.test_fasthist_multislot.setup`)."""
    return multislot_setup(name, make=config, **kw)


def _equal_states(cols, plan, theta, widths, what: str) -> None:
    fast = chunk_state(cols, plan, theta, widths, order=1, backend="numba")
    ref = chunk_state(cols, plan, theta, widths, order=1, backend="jax")
    assert_trees_close(ref.derived.value, fast.derived.value, f"value {what}")
    assert_trees_close(ref.derived.jac, fast.derived.jac, f"jacobian {what}")
    return fast


@pytest.mark.parametrize("name", [FILES[0], pytest.param(FILES[1], marks=pytest.mark.slow)])
def test_states_and_jacobians_equal_the_jax_kernel(name: str, monkeypatch) -> None:
    """Every histogram of two sets and the template (the jet-muon mass in a channel
    region, its shift sides and weight variations; soft bins; trainable edges) and the
    observable: the numba states and Jacobians equal the JAX kernel's (1e-12); both
    orientations of the walk (the outer set first or second in the expression) run."""
    plan, theta, widths, cols = setup(name)
    assert numba_refusal(plan, 1, theta) is None
    turned: set = set()  # whether the outer set (fewer tuples) is the expression's first
    real = _fastleading.walk

    def spy(*a, **k):
        got = real(*a, **k)
        turned.update(c.sets != k[0] for k, c in got.items() if c.sets)
        return got

    monkeypatch.setattr(_fastleading, "walk", spy)
    fast = _equal_states(cols, plan, theta, widths, name)
    assert turned == {True, False}
    h = fast.derived.value["histograms"]
    for key in ("mlb", "mem", "drjm", "ptmmj"):
        assert np.abs(h[key].sumw_flow).max() > 0, key  # filled (2015: negative weights)
    assert float(np.abs(fast.derived.jac["histograms"]["mem"].sumw_flow).max()) > 0


def test_threads_give_the_same_bits() -> None:
    """1 and 3 threads give the same bits (values and Jacobians of every histogram)."""
    plan, theta, widths, cols = setup(likelihood=False)
    one, three = (chunk_state(cols, plan, theta, widths, order=1, backend="numba", threads=t)
                  for t in (1, 3))
    for group in ("value", "jac"):
        for key in ("mlb", "mem", "drjm", "ptmmj"):
            a, b = (getattr(s.derived, group)["histograms"][key] for s in (one, three))
            assert np.array_equal(a.sumw_flow, b.sumw_flow), (group, key)
            assert np.array_equal(a.sumw2_flow, b.sumw2_flow), (group, key)


def _two_sets(rng, counts):
    """Two collections (``counts`` ``(2, E)`` objects), one set each (pattern 0 out of it,
    1 and 2 in it), the joint count state ``3 a + b`` of their members (each capped at 2);
    the candidates of ``(c0's set, depth 1) x (c1's set, depth 0)``: ``(args before the
    pattern probabilities, args after them, off, pv)``."""
    coff = np.zeros((2, counts.shape[1] + 1), np.int64)
    coff[:, 1:] = np.cumsum(counts, axis=1)
    base = np.array([0, coff[0, -1], coff[0, -1] + coff[1, -1]])
    # int8 patterns, as the pipeline's tables (analysis.pipeline.backends.numba._fasttables):
    # the walk and its VJP run the versions the pipeline's tests compiled (an int64 table
    # compiled a version of each of its own, ~30 s cold)
    pat = np.zeros((2, 3, 1), np.int8)
    pat[:, 1:, 0] = 1
    tgt = np.array([[[k if p == 0 else (min(k // 3 + 1, 2) * 3 + k % 3 if c == 0 else
                                        k // 3 * 3 + min(k % 3 + 1, 2)) for k in range(9)]
                     for p in range(3)] for c in range(2)], np.int64)
    pv = rng.uniform(0.05, 1.0, size=(base[-1], 3))
    pv /= pv.sum(axis=1, keepdims=True)
    order = [np.arange(coff[c, -1]) for c in range(2)]
    per = [np.array([math.comb(int(k), r + 1) for k in counts[c]]) for c, r in ((0, 1), (1, 0))]
    off = np.concatenate([[0], np.cumsum(per[0] * per[1])])
    sets = (coff, base, order[0], counts[0].copy(), 0, 0, 1, order[1], counts[1].copy(), 1, 0, 0)
    return sets, (pat, np.array([3, 3]), tgt), off, pv


def test_two_sets_walk_and_its_vjp_equal_central_differences() -> None:
    """The walk of two sets of two collections (synthetic): its tangents (a direction in
    the pattern probabilities) and its vector-Jacobian product's ``dL/dpi``, ``dL/df . df``
    for ``L = sum_q wbar_q w_q`` equal central differences of its values (1e-7)."""
    rng = np.random.default_rng(3)
    counts = np.array([[0, 3, 2, 4, 1, 5], [2, 1, 0, 3, 2, 1]])
    sets, tables, off, pv = _two_sets(rng, counts)
    f = rng.uniform(0.0, 1.0, 9)
    df = rng.normal(size=(9, 2))
    n_q = int(off[-1])
    d = rng.normal(size=pv.shape)

    def walk(pv, f, pd):
        w = np.zeros((n_q, LANES))
        obj = np.zeros((n_q, 3), np.int64)
        df_l = np.zeros((9, LANES))
        args = (*sets, pv, pd, *tables, f, df_l, off, 2, w, obj, None, None, None)
        # compiled as the pipeline compiles it (SLP on, as _fastleading.walk_key): a first
        # call here must not cache a build of its own
        _numba_dp.compiled(_numba_lead.candidates, args)(*args, 0, 3)
        return w

    pd = np.zeros(pv.shape + (LANES,))
    pd[:, :, 1] = d
    w = walk(pv, f, pd)
    assert np.count_nonzero(w[:, 0]) == n_q > 20
    h = 1e-5
    fd = (walk(pv + h * d, f, 0 * pd)[:, 0] - walk(pv - h * d, f, 0 * pd)[:, 0]) / (2 * h)
    np.testing.assert_allclose(w[:, 1], fd, rtol=1e-7, atol=1e-9)
    wbar = rng.normal(size=n_q)
    gp, dfs = np.zeros_like(pv), np.zeros((counts.shape[1], 2))
    _numba_lead.candidates(*sets, pv, 0.0, *tables, f, df, off, 2, None, None, wbar, gp, dfs,
                           0, 3)
    np.testing.assert_allclose(np.sum(gp * d), wbar @ fd, rtol=1e-7)
    for r in range(2):
        fd_f = (walk(pv, f + h * df[:, r], 0 * pd)[:, 0] - walk(pv, f - h * df[:, r],
                                                               0 * pd)[:, 0]) / (2 * h)
        np.testing.assert_allclose(dfs[:, r].sum(), wbar @ fd_f, rtol=1e-7)


@pytest.mark.slow  # the JAX sweep's compile and central differences of the JAX kernel (the
# default suite: the walk's VJP against central differences above)
def test_pullback_equals_the_jax_sweep_and_central_differences() -> None:
    """Every histogram, the template and the observable read: the numba pullback equals
    the JAX sweep (gradient and value states, 1e-10) and central differences along a
    random direction and a trainable edge of the electron-muon mass."""
    plan, theta, widths, cols = setup()
    payload = hists_payload(cols, plan, theta, widths)
    g = check(cols, plan, theta, widths, payload, fd=("mem.edges[2]",))
    names = plan.trainable_names
    for n in ("mem.edges[1]", "n", "b", "el", "mu", "pt_min"):
        assert abs(g[names.index(n)]) > 0, n


@pytest.mark.slow  # the JAX entries pass's compile (the default suite: the states test's
# observable of the same expression)
def test_observable_entries_equal_the_jax_kernels() -> None:
    """An entries pass of the jet-muon mass (the plots' entries): the same (value, weight)
    multiset as the JAX kernel's (1e-12)."""
    cfg = config(likelihood=False)
    cfg["histograms"] = []
    cfg_ = config_from_dict(cfg)
    plan = build_plan(cfg_)
    theta = np.array([cfg_.initial_params()[n] for n in plan.param_names], np.float64)
    widths = np.array(initial_widths(cfg_), np.float64)
    cols = read_columns(SHARED_DATA / FILES[0], plan)
    x, w = fastkernel.observable_entries(cols, plan, theta, widths, 0)
    arrays, shapes = kernel.pad_columns(cols, plan)
    xr, wr = (np.asarray(a) for a in kernel._entries(theta, widths, arrays, plan, shapes, 0))
    assert np.count_nonzero(w) == np.count_nonzero(wr) > 100
    # the masses' rounding (eager here, compiled there): 1e-12 of the largest
    np.testing.assert_allclose(np.sort(x[w != 0]), np.sort(xr[wr != 0]), rtol=1e-12,
                               atol=1e-12 * np.abs(xr).max())
    np.testing.assert_allclose(np.sort(w[w != 0]), np.sort(wr[wr != 0]), rtol=1e-12,
                               atol=1e-12 * np.abs(wr).max())
    np.testing.assert_allclose(np.sum(w * x), np.sum(wr * xr), rtol=1e-12)


@pytest.mark.slow  # JAX kernels of four shapes (the default suite: states = the JAX kernel)
def test_hard_widths_and_tiny_chunks() -> None:
    """Every width 0, and chunks of 0, 1 and 3 events: the states equal the JAX
    kernel's."""
    plan, theta, widths, cols = setup(likelihood=False)
    zero = np.zeros_like(widths)
    _equal_states(cols, plan, theta, zero, "width 0")
    for a, b in ((0, 0), (3, 4), (5, 8)):
        _equal_states(slice_columns(cols, a, b), plan, theta, zero, f"{a}:{b}")


def test_rules_serve_two_collections_and_refuse_the_rest() -> None:
    """Two indexed sets of two collections or of one are served in states and pullback
    passes (histograms and observables); three sets are refused in one line naming the
    histogram or observable and the reason."""
    cases = (
        ("mass(jets[0] + muons[0])", None, None),
        ("mass(jets[0] + bjets[0])", None, None),
        ("pt(jets[0] + muons[0] + electrons[0])", "indexes 3 sets", "indexes 3 sets"),
    )
    for x, states, pullback in cases:
        cfg = config(likelihood=False)
        cfg["histograms"] = [{"name": "other", "x": x, "edges": [0.0, 100.0, 300.0]}]
        cfg["observables"] = [{"name": "obs", "x": x, "stats": ["mean"]}]
        plan = build_plan(config_from_dict(cfg))
        theta = np.zeros(len(plan.param_names))
        for why, want in ((numba_refusal(plan, 1, theta), states),
                          (numba_refusal(plan, 0, theta, pullback=[None] * len(
                              state_paths(plan))), pullback)):
            assert (why is None) == (want is None), (x, why)
            if want is not None:
                assert "\n" not in why and f"{x!r} {want}" in why, why
                assert "observable 'obs'" in why or "histogram 'other'" in why, why
