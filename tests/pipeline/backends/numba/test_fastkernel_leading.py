"""Indexed observables on the numba kernel (``analysis.pipeline.backends.numba._fastleading``) against the
JAX kernel and finite differences.

The JAX kernel (:func:`analysis.select.objects.leading`) is the reference, itself checked
against exact enumeration of the pass/fail configurations in
``tests/pipeline/test_object_sets_enumeration.py``. Values and Jacobians agree to 1e-12
over: ``S[i].f`` at several depths, ``abs(S[i].f)``, the trijet mass, ``deltaR``, ``mt``
with a per-event object, two variables of one candidate, a derived set and a second
collection indexed under joint counts, widths 0 (ties at the thresholds) and > 0, events
with fewer objects than the tuple and an empty chunk; the AGC v12 config on its real file.
"""

from __future__ import annotations

import numpy as np
import pytest

from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.jax import passes as kernel
from analysis.pipeline.backends.numba import _fastleading, fastkernel
from analysis.pipeline.layout import ChunkColumns
from analysis.select.objects import ObjectCapError
from tests.conftest import central_difference, numba_refusal
from tests.pipeline.backends.numba.test_fastkernel import REPO, compare, make_plan, sets_config

OBSERVABLES = [
    {"name": "lead", "x": "jets[0].pt", "stats": ["mean", "std", "skew"]},
    {"name": "third_eta", "x": "abs(jets[2].eta)", "stats": ["mean", "kurtosis"]},
    {"name": "m3j", "x": "mass(jets[0] + jets[1] + jets[2])", "stats": ["mean", "std"]},
    {"name": "dr", "x": "deltaR(jets[0], jets[1])", "stats": ["mean", "var"]},
    {"name": "mt", "x": "mt(jets[0], MET)", "stats": ["mean"]},
    {"name": "pt_eta", "x": "jets[1].pt", "y": "jets[1].eta", "stats": ["covar", "corr"]},
    {"name": "bpt", "x": "bjets[0].pt", "stats": ["mean", "std"]},
    {"name": "mu", "x": "muons[0].pt", "stats": ["mean"]},
    {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean"]},
    {"name": "pt", "x": "jets.pt", "stats": ["mean"]},
]


def config(*, width: float, observables=OBSERVABLES) -> dict:
    """The numba kernel tests' sets (jets, b-jets from jets, muons; joint counts over two
    collections, a MET cut), the jets capped, with indexed observables."""
    cfg = sets_config(width=width)
    cfg["objects"]["jets"]["max_objects"] = 16
    cfg["observables"] = observables
    return cfg


def columns(n: int, *, seed: int = 0, ties: bool = False) -> ChunkColumns:
    """``n`` events of Poisson jets (pt, eta, phi, mass, b-tag) and muons, MET (pt, phi),
    negative weights; the first events have 0, 1, 2 and 12 jets."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(4.5, n).astype(np.int64)
    counts[: min(n, 4)] = [0, 1, 2, 12][: min(n, 4)]
    t = int(counts.sum())
    jets = {"pt": 15 + rng.exponential(40, t), "eta": rng.normal(0, 1.5, t),
            "phi": rng.uniform(-np.pi, np.pi, t), "mass": rng.exponential(10, t),
            "btagDeepFlavB": rng.uniform(0, 1, t)}
    n_mu = rng.poisson(1.0, n).astype(np.int64)
    mu = {"pt": 5 + rng.exponential(20, int(n_mu.sum()))}
    if ties:  # values on a grid: some equal the thresholds exactly
        jets["pt"], jets["btagDeepFlavB"] = np.round(jets["pt"]), np.round(jets["btagDeepFlavB"], 1)
        mu["pt"] = np.round(mu["pt"])
    events = {"MET.pt": np.abs(rng.normal(0, 60, n)), "MET.phi": rng.uniform(-np.pi, np.pi, n)}
    return ChunkColumns(n, rng.normal(0.8, 1.0, n), events,
                        {"Jet": (counts, jets), "Muon": (n_mu, mu)})


def plan_and_columns():
    """One plan (so that the JAX reference compiles once), ``n`` between integers."""
    plan, theta, widths = make_plan(config(width=1.0))
    theta[plan.param_names.index("n")] = 3.4  # a soft count threshold between integers
    return plan, theta, widths


@pytest.mark.parametrize("hard", [False, True])
def test_indexed_observables_equal_the_jax_kernels(hard):
    plan, theta, widths = plan_and_columns()
    assert numba_refusal(plan, 1) is None
    # hard: every width 0, values on a grid so that some equal the thresholds exactly
    value, jac = compare(plan, columns(600, seed=2, ties=hard), theta, widths * (not hard))
    d = jac["observables"]["m3j"]["moments"].sumw
    if hard:  # width 0: the derivatives are exactly 0
        assert np.all(d == 0)
    else:  # the weights move with every parameter
        assert np.all(np.abs(d) > 0)


# each tiny shape compiles the JAX reference anew: the 4-event chunk is the slow run's
@pytest.mark.parametrize("n", [0, pytest.param(4, marks=pytest.mark.slow)])
def test_tiny_and_empty_chunks(n):
    plan, theta, widths = plan_and_columns()
    value, _ = compare(plan, columns(n, seed=1), theta, widths)
    if n == 0:  # no event: no trijet entry
        assert float(value["observables"]["m3j"]["moments"].sumw) == 0.0


def test_order_0_and_histogram_entries_equal_the_jax_kernels():
    plan, theta, widths = plan_and_columns()
    cols = columns(600, seed=2)  # the shapes of the test above: no new compilation
    fast, _ = fastkernel.evaluate_columns(cols, plan, theta, widths, order=0)
    arrays, shapes = kernel.pad_columns(cols, plan)
    ref, _, _ = kernel.evaluate_chunk(theta, widths, arrays, plan, shapes, order=1)
    for name in ("m3j", "dr", "mu"):
        a, b = ref["observables"][name]["moments"], fast["observables"][name]["moments"]
        np.testing.assert_allclose(float(a.sumw), float(b.sumw), rtol=1e-12)
        np.testing.assert_allclose(float(a.center + a.dmean), float(b.center + b.dmean),
                                   rtol=1e-12)
    # histogram entries: the same (value, weight) multiset as the JAX kernel's
    i = [o.name for o in plan.observables].index("m3j")
    x, w = fastkernel.observable_entries(cols, plan, theta, widths, i)
    keep = w != 0
    xr, wr = kernel._entries(theta, widths, arrays, plan, shapes, i)
    xr, wr = np.asarray(xr), np.asarray(wr)
    ref_keep = wr != 0
    np.testing.assert_allclose(np.sort(x[keep]), np.sort(xr[ref_keep]), rtol=1e-12)
    np.testing.assert_allclose(np.sum(w * x), np.sum(wr * xr), rtol=1e-12)


def test_jacobian_vs_finite_differences():
    obs = [o for o in OBSERVABLES if o["name"] in ("m3j", "lead", "mt")]
    plan, theta, widths = make_plan(config(width=1.0, observables=obs))
    theta[plan.param_names.index("n")] = 3.4
    cols = columns(200, seed=5)
    trainable = plan.trainable

    def f(t):
        full = theta.copy()
        full[list(trainable)] = t
        v, _ = fastkernel.evaluate_columns(cols, plan, full, widths, order=0)
        m = v["observables"]["m3j"]["moments"]
        return np.array([float(m.sumw), float(m.sumw * (m.center + m.dmean))])

    _, jac = fastkernel.evaluate_columns(cols, plan, theta, widths, order=1)
    m = jac["observables"]["m3j"]["moments"]
    v, _ = fastkernel.evaluate_columns(cols, plan, theta, widths, order=0)
    m0 = v["observables"]["m3j"]["moments"]
    mean0 = float(m0.center + m0.dmean)
    got = np.stack([np.asarray(m.sumw), float(m0.sumw) * np.asarray(m.dmean)
                    + mean0 * np.asarray(m.sumw)])
    fd = central_difference(f, theta[list(trainable)].copy(), 1e-4)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8 * np.max(np.abs(fd)))


def test_two_indexed_sets_of_one_collection_served_three_stay_on_the_jax_kernel():
    obs = [{"name": "mb", "x": "mass(jets[0] + bjets[0])", "stats": ["mean"]}]
    plan, _, _ = make_plan(config(width=1.0, observables=obs))
    assert numba_refusal(plan, 1) is None  # test_fasthist_samecoll: = the JAX kernel
    obs = [{"name": "mbm", "x": "pt(jets[0] + bjets[0] + muons[0])", "stats": ["mean"]}]
    why = numba_refusal(make_plan(config(width=1.0, observables=obs))[0], 1)
    assert "'pt(jets[0] + bjets[0] + muons[0])' indexes 3 sets" in why


def test_uncapped_collection_refuses_too_many_tuples_as_the_jax_kernel():
    cfg = config(width=1.0, observables=[OBSERVABLES[2]])
    del cfg["objects"]["jets"]["max_objects"]
    plan, theta, widths = make_plan(cfg)
    cols = columns(50, seed=0)
    counts, jets = cols.collections["Jet"]
    counts = counts.copy()
    counts[3] = 31  # C(31, 3) = 4495 > 4096 candidate tuples
    extra = int(counts.sum()) - len(jets["pt"])
    jets = {k: np.concatenate([v, v[:extra]]) for k, v in jets.items()}
    cols = ChunkColumns(cols.n_events, cols.weight, cols.events,
                        {"Jet": (counts, jets), "Muon": cols.collections["Muon"]})
    msgs = []
    for engine in ("auto", "jax"):
        with pytest.raises(ObjectCapError) as err:
            chunk_state(cols, plan, theta, widths, order=1, backend=engine)
        msgs.append(str(err.value))
    assert msgs[0] == msgs[1]
    assert "4495 candidate tuples per event (objects that can pass per event Jet: 31)" in msgs[0]
    assert _fastleading.MAX_TUPLES == 4096


def test_agc_v12_config_on_its_real_file(shared_data):
    # the AGC configs' plan (the 2015 file's differs in its b-tag field only)
    from analysis.config.loader import load_config
    from analysis.pipeline.plan import build_plan, initial_widths
    from tests.chunked_helpers import read_columns

    config = load_config(REPO / "configs" / "agc_ttbar_v12.yaml")
    plan = build_plan(config)
    assert numba_refusal(plan, 1) is None
    theta = np.array([config.initial_params()[n] for n in plan.param_names], np.float64)
    widths = np.array(initial_widths(config), np.float64)
    cols = read_columns(shared_data / "nano_tt_v12.root", plan, "genWeight")
    value, _ = compare(plan, cols, theta, widths)
    assert float(value["observables"]["m3j"]["moments"].sumw) > 0
