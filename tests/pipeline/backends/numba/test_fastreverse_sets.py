"""Reverse mode on numba for every count model (analysis.pipeline.backends.numba._fastsens):
two sets in one collection (b-jets with their parent), two collections, a joint count, a
trainable count threshold and learned scores beside them, on real files (ttbar 2015 and
NanoAOD v12). The numba pullback equals the JAX sweep (analysis.pipeline.backends.jax.reverse,
the reference; 1e-10) and central finite differences of the JAX values; its value states
equal the forward kernel's; the pattern sensitivities equal exact enumeration."""

from __future__ import annotations

import copy
import warnings
from collections import Counter

import jax
import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.pipeline import scorecols
from analysis.pipeline.backends.jax import reverse as jax_reverse
from analysis.pipeline.backends.numba import _fastsens, _fasttables, fastkernel, fastreverse
from analysis.pipeline.backends.numba.kernels import _numba_sens
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.pipeline.results import YIELDS, state_names
from analysis.select import chainwalk
from tests.chunked_helpers import read_columns
from tests.conftest import SHARED_DATA, numba_refusal
from tests.pipeline.test_score_kernel import config as score_config
from tests.reference.enumeration import configurations

#: file -> its b-tag discriminator (the 2015 file's DeepFlavB is a placeholder, -3000)
FILES = {"nanoAOD_2015_CMS_Open_Data_ttbar.root": "btagCSVV2", "nano_tt_v12.root": "btagDeepFlavB"}


def with_sets(cfg: dict, *, joint: bool = True, btag: str = "btagDeepFlavB") -> dict:
    """``cfg`` (:func:`tests.pipeline.test_score_kernel.config`'s: a jet score in the
    jets' cuts, an event score in the selection) with b-jets derived from the jets and
    muons, ``>= n_min`` jets (trainable), a joint count of b-jets and muons, field
    observables of both jet sets."""
    cfg["scores"][0]["mlp"]["inputs"][2] = f"jets.{btag}"
    cfg["parameters"].update({
        "b_min": {"init": 0.3, "bounds": [0.0, 1.0]},
        "mu_min": {"init": 8.0, "bounds": [0.0, 50.0]},
        "n_min": {"init": 2, "bounds": [0, 4]},
        "eta_max": {"init": 2.0, "bounds": [0.5, 4.7]},
    })
    cfg["objects"]["jets"]["cuts"].append(
        {"var": "abs_eta", "op": "<=", "param": "eta_max", "width": 0.3})
    cfg["objects"]["bjets"] = {"from": "jets", "cuts": [
        {"var": btag, "op": ">", "param": "b_min", "width": 0.1}]}
    cfg["objects"]["muons"] = {"collection": "Muon", "cuts": [
        {"var": "pt", "op": ">", "param": "mu_min", "width": 3.0}]}
    cfg["selection"][0] = {"count": "jets", "op": ">=", "param": "n_min", "width": 0.5}
    cfg["selection"].append({"count": "bjets", "op": ">=", "value": 1})
    if joint:
        cfg["selection"].append({"count": ["bjets", "muons"], "op": "<=", "value": 3})
    cfg["observables"] = [
        {"name": "jpt", "x": "jets.pt", "stats": ["mean", "std"]},
        {"name": "bpt", "x": "bjets.pt", "y": "abs(bjets.eta)", "stats": ["mean", "corr"]},
        {"name": "evscore", "x": "score.ev", "stats": ["mean"]},
    ]
    return cfg


def sets_config(*, joint: bool = True, btag: str = "btagDeepFlavB") -> dict:
    """:func:`with_sets` of the score kernel's test config."""
    return with_sets(score_config(hidden=(3,)), joint=joint, btag=btag)


def _setup(cfg: dict, name: str):
    """``(plan, theta, widths, columns)`` of ``cfg`` on the shared file ``name``, ``n_min``
    between two counts."""
    config = config_from_dict(copy.deepcopy(cfg))
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names], np.float64)
    theta[plan.param_names.index("n_min")] = 2.4  # between two counts
    widths = np.array(initial_widths(config), np.float64)
    return plan, theta, widths, read_columns(SHARED_DATA / name, plan)


def _payload(plan, a1: float, a2: float) -> list:
    names = state_names(scorecols.bare(plan))
    cots = dict(zip(YIELDS, (a1, a2), strict=True))
    return [(None, np.float64(cots[n])) if n in cots else None for n in names]


def zero_filled(payload: list, full: list) -> list:
    """``payload`` with each ``None`` (a state not read) ``full``'s entry for that state
    with zero cotangents (its anchor kept): the same pulled sum and gradient. For the JAX
    sweep: a ``None`` changes its arguments' tree, so each payload of a plan that leaves
    other states out would compile it again (~10-20 s each); filled, they share one."""
    out = []
    for e, (anchor, cot) in zip(payload, full, strict=True):
        if e is None:
            zero = (tuple(np.float64(0.0) for _ in cot) if isinstance(cot, tuple)
                    else np.zeros_like(cot))
            e = (anchor, zero)
        out.append(e)
    return out


def _objective(cols, plan, theta, widths, a1: float, a2: float) -> float:
    """``a1 Y + a2 Y2`` of the JAX kernel's value states (the JAX sweep's)."""
    st = jax_reverse.chunk_pullback(cols, plan, theta, widths, _payload(plan, a1, a2))
    v = st.derived.value
    return a1 * float(v["selected_sumw"]) + a2 * float(v["selected_sumw2"])


def observables_payload(plan, seed: int = 0) -> list:
    """A payload that reads every state: the yields, the field observables' moments and
    comoments (both jet sets) and the event score's moments (a branch), its power sums'
    cotangents random, about anchors near the means (scaled by the deviations' size)."""
    rng = np.random.default_rng(seed)
    out: list = []
    for n in state_names(scorecols.bare(plan)):
        if n in YIELDS:
            out.append((None, np.float64(rng.normal())))
        elif n.endswith(".moments"):
            out.append((np.float64(40.0), tuple(np.float64(rng.normal() / 40.0**r)
                                                for r in range(5))))
        else:
            scale = np.array([1.0, 40.0, 1.0, 1600.0, 1.0, 40.0])
            out.append(((np.float64(40.0), np.float64(1.0)),
                        tuple(np.float64(v) for v in rng.normal(size=6) / scale)))
    return out


@pytest.mark.parametrize("name", list(FILES))
def test_numba_pullback_equals_the_jax_sweep_and_finite_differences(name: str) -> None:
    plan, theta, widths, cols = _setup(sets_config(btag=FILES[name]), name)
    assert numba_refusal(plan, 0, theta, yield_rows=(True, True)) is None
    assert len(plan.trainable) > 30  # cut thresholds, a count threshold, network weights
    a1, a2 = 0.7, -0.013
    payload = _payload(plan, a1, a2)
    trace: Counter = Counter()
    got = fastreverse.chunk_pullback(cols, plan, theta, widths, payload, trace=trace)
    assert trace[None, 0] == 1  # one walk gives the gradient and the value states
    ref = jax_reverse.chunk_pullback(cols, plan, theta, widths, payload)
    g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
    names = plan.trainable_names
    for n in ("jet_pt_min", "tag_min", "ev_min", "b_min", "mu_min", "n_min", "eta_max"):
        assert abs(r[names.index(n)]) > 0, n  # every kind of parameter is differentiated
    np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * np.abs(r).max())
    for x, y in zip(jax.tree_util.tree_leaves(got.derived.value),
                    jax.tree_util.tree_leaves(ref.derived.value), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-12)

    # central finite differences of the JAX values: each threshold, and one random
    # direction over every parameter (the networks' weights)
    idx = np.asarray(plan.trainable)
    rng = np.random.default_rng(3)
    dirs = [(names.index(n), h) for n, h in (("jet_pt_min", 1e-3), ("b_min", 1e-5),
                                             ("mu_min", 1e-3), ("n_min", 1e-5))]
    for i, h in dirs + [(None, 1e-5)]:
        v = np.zeros(len(names))
        if i is None:
            v = rng.normal(size=len(names))
            v /= np.linalg.norm(v)
        else:
            v[i] = 1.0
        step = np.zeros_like(theta)
        step[idx] = h * v
        fd = (_objective(cols, plan, theta + step, widths, a1, a2)
              - _objective(cols, plan, theta - step, widths, a1, a2)) / (2 * h)
        np.testing.assert_allclose(g @ v, fd, rtol=1e-6, atol=1e-9 * np.abs(g).max())


@pytest.mark.parametrize("joint", [True, False])
def test_value_states_come_from_the_walk(joint: bool) -> None:
    """The reverse pass's yields and field observables (objects' weights of both jet
    sets from H) equal the forward kernel's at order 0 (the same floats but for the
    order of a sum: 1e-14), from one walk."""
    plan, theta, widths, cols = _setup(sets_config(joint=joint), "nano_tt_v12.root")
    got = fastreverse.chunk_yield_gradients(cols, plan, theta, widths)
    run = scorecols.bare(plan)
    scored = scorecols.score_columns(cols, plan, theta)
    ref, _ = fastkernel.evaluate_columns(scored, run, theta, widths, order=0)
    a = jax.tree_util.tree_leaves(got.derived.value)
    b = jax.tree_util.tree_leaves(ref)
    assert len(a) == len(b) > 6
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-14, atol=0.0)


def test_pattern_sensitivities_equal_enumeration() -> None:
    """Jets with b-jets (parent) and a joint count with muons: P, dP/dq of each set and
    the objects' weights of each set against all pass/fail configurations of every
    object's set memberships (dP/dq_js = P(q_js = 1) - P(q_js = 0): P is affine in it)."""
    from tests.pipeline.backends.numba.test_fastkernel import make_plan
    from tests.pipeline.backends.numba.test_fastkernel import sets_config as two_coll

    plan, theta, widths = make_plan(two_coll(width=1.0))
    tab = fastreverse._tables(plan)
    jets, bjets, muons = (tab.gidx[n] for n in ("jets", "bjets", "muons"))
    assert list(tab.collections) == ["Jet", "Muon"]
    rng = np.random.default_rng(0)
    n_jet, n_mu = np.array([0, 3, 2, 1, 4]), np.array([1, 0, 2, 1, 1])
    coff = np.stack([np.concatenate([[0], np.cumsum(n)]) for n in (n_jet, n_mu)])
    base = np.array([0, n_jet.sum(), n_jet.sum() + n_mu.sum()])
    q_of = {jets: rng.uniform(0.05, 0.95, n_jet.sum()), bjets: rng.uniform(0.05, 0.95, n_jet.sum()),
            muons: rng.uniform(0.05, 0.95, n_mu.sum())}
    q_of[bjets][1] = 1.0  # a hard cut too
    table = _fasttables.walk_table(tab, plan.sets, theta, widths, ())
    walk = _fastsens.walk(coff, _fastsens.inputs(tab, table, base, q_of), {jets, bjets},
                          max_seq=7, block=2, threads=1)
    f, _ = _fasttables._pass_table(plan.sets, theta, widths, ())
    shape = plan.sets.model.shape
    model = plan.sets.model

    def prob(e: int, q: dict) -> float:
        """P(pass) of event e by enumeration of every object's memberships."""
        qj = np.stack([q[jets][coff[0, e]: coff[0, e + 1]], q[bjets][coff[0, e]: coff[0, e + 1]]])
        qm = q[muons][coff[1, e]: coff[1, e + 1]]
        total = 0.0
        flat = np.concatenate([qj[0], qj[1], qm])
        conf, p = configurations(flat)
        nj = qj.shape[1]
        for c, w in zip(conf, p, strict=True):
            inj, inb, inm = c[:nj], c[nj: 2 * nj], c[2 * nj:]
            state = [0] * len(shape)
            counts = {"jets": int(inj.sum()), "bjets": int((inj & inb).sum()),
                      "muons": int(inm.sum())}
            for v, (sets, _) in enumerate(model.variables):
                state[v] = min(sum(counts[s] for s in sets), shape[v] - 1)
            total += w * f[np.ravel_multi_index(tuple(state), shape)]
        return total

    for e in range(n_jet.size):
        np.testing.assert_allclose(walk.pe[e], prob(e, q_of), rtol=1e-12, atol=1e-15)
        for gs, ci in ((jets, 0), (bjets, 0), (muons, 1)):
            for j in range(coff[ci, e], coff[ci, e + 1]):
                hi, lo = copy.deepcopy(q_of), copy.deepcopy(q_of)
                hi[gs][j], lo[gs][j] = 1.0, 0.0
                p_hi = prob(e, hi)
                np.testing.assert_allclose(walk.dq[gs][j], p_hi - prob(e, lo), rtol=1e-11,
                                           atol=1e-14)
    # the objects' weights: P(j in s and the event passes)
    for e in range(n_jet.size):
        for j in range(coff[0, e], coff[0, e + 1]):
            hi = copy.deepcopy(q_of)
            hi[jets][j] = 1.0
            np.testing.assert_allclose(walk.ow[jets][j], q_of[jets][j] * prob(e, hi),
                                       rtol=1e-11, atol=1e-15)
            hb = copy.deepcopy(hi)
            hb[bjets][j] = 1.0
            np.testing.assert_allclose(walk.ow[bjets][j],
                                       q_of[jets][j] * q_of[bjets][j] * prob(e, hb),
                                       rtol=1e-11, atol=1e-15)


def test_the_kernel_is_the_walks_steps() -> None:
    """The general kernel serves the one-set chain too: P, dP/dq and F_n . df there equal
    the chain's kernel (:func:`analysis.select.chainwalk.sens_walk`)."""
    rng = np.random.default_rng(1)
    counts = np.array([0, 1, 3, 6, 5, 2])
    coff = np.concatenate([[0], np.cumsum(counts)])
    q = rng.uniform(0.02, 0.98, size=coff[-1])
    f = np.array([0.0, 0.15, 0.7, 1.0])
    df = rng.normal(size=(4, 2))
    pe, dq, fn, ow = (np.zeros(6), np.zeros(q.size), np.zeros((6, 4)), np.zeros(q.size))
    chainwalk.sens_walk(coff, q, f, True, 6, 2, pe, dq, fn, ow, 0, 3)
    tgt = np.array([[[0, 1, 2, 3], [1, 2, 3, 3]]])
    pv = np.stack([1.0 - q, q], axis=1)
    pe2, hp, dfe = np.zeros(6), np.zeros((q.size, 2)), np.zeros((6, 2))
    _numba_sens.pattern_sensitivities(coff[None, :], np.array([0, q.size]), pv,
                                      np.array([2]), tgt, f, df, np.zeros((1, 2)), False, 6, 2,
                                      pe2, hp, dfe, np.zeros((1, 1)), np.zeros((0, 2)), 0, 3)
    np.testing.assert_allclose(pe2, pe, rtol=1e-14, atol=0)
    np.testing.assert_allclose(hp[:, 1] - hp[:, 0], dq, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dfe, fn @ df, rtol=1e-13, atol=1e-15)


@pytest.mark.slow  # ~60 s under load: two evaluators over two datasets, the JAX sweep's compile
def test_auto_runs_the_numba_pass_with_the_jax_sweeps_gradient(monkeypatch) -> None:
    """Under ``auto``, the objective's gradient over two datasets (a significance: the
    yields; a target on the jets' mean pT: an observable, so values then the pullback
    pass) for a learned score beside two jet sets and muons runs the numba passes and
    equals the JAX sweep's (1e-10)."""
    from tests.optimize.test_score_reverse import _config

    data = with_sets(_config(100_000))
    data["objective"]["terms"].append(
        {"type": "target", "stat": "tt.jpt.mean", "value": 60.0, "weight": 1e-4})
    auto_equals_jax_sweep(data, monkeypatch)


def auto_equals_jax_sweep(data: dict, monkeypatch, *, path=None, cache: bool = True,
                          scores_on_numba: bool = False,
                          moved: tuple[str, ...] | None = ("b_min", "mu_min", "n_min"),
                          states: bool = False):
    """The config ``data`` under ``auto`` runs the numba passes (no JAX fallback line), and
    its reverse objective and gradient equal the JAX sweep's (1e-10), which runs no numba
    reverse pass.

    Parameters
    ----------
    data : dict
        The config.
    monkeypatch : pytest.MonkeyPatch
        To count the numba reverse passes.
    path : pathlib.Path, optional
        The YAML file ``data`` was read from (its source and base directory).
    cache : bool
        The evaluators' column cache.
    scores_on_numba : bool
        The reference's learned scores on numba (``Backend``'s option; its reverse pass is
        the JAX sweep either way).
    moved : tuple of str or None
        Trainable parameters whose gradient is nonzero (``None``: every one).
    states : bool
        Also run the ``auto`` evaluator's order-1 states pass (no fallback line either).

    Returns
    -------
    dict or None
        Those states (``states``), else ``None``.
    """
    from analysis.driver.runner import Evaluator
    from analysis.optimize.objectives import Objective
    from analysis.optimize.reverse import reverse_objective
    from analysis.pipeline.backend import Backend
    from tests.pipeline.backends.numba.test_fastreverse import _count_numba

    cfg = (config_from_dict(data) if path is None
           else config_from_dict(data, source=str(path), base_dir=path.parent))
    out = None
    with warnings.catch_warnings(record=True) as caught, Evaluator(cfg, cache=cache) as ev:
        warnings.simplefilter("always")
        calls = _count_numba(monkeypatch)
        got = reverse_objective(Objective(cfg, ev.plan), ev, None, None)
        assert calls  # the numba pass ran
        n = len(calls)
        if states:
            out = ev.run(order=1)
    assert not [w for w in caught if "JAX reference" in str(w.message)]
    reference = Backend(numba_reverse=False, scores_on_numba=scores_on_numba)
    with Evaluator(cfg, cache=cache, backend=reference) as ref:
        want = reverse_objective(Objective(cfg, ref.plan), ref, None, None)
        assert len(calls) == n
    grad = np.asarray(want["grad"])
    names = ev.plan.trainable_names
    if moved is None:
        assert np.abs(grad).min() > 0
    else:
        assert all(abs(grad[names.index(p)]) > 0 for p in moved)
    np.testing.assert_allclose(got["objective"], want["objective"], rtol=1e-10)
    np.testing.assert_allclose(got["grad"], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())
    return out


@pytest.mark.parametrize("name", list(FILES))
def test_a_payload_reading_observables_equals_the_jax_sweep(name: str) -> None:
    """Moments and comoments of the jets' and b-jets' fields and an event score's
    moments read by the payload: the walk's vector-Jacobian product (the objects'
    weights' cotangents) equals the JAX sweep (1e-10) and central differences of the JAX
    kernel's pulled sum along a random direction and a b-tag threshold."""
    from analysis.stats.pullback import pulled_sum

    plan, theta, widths, cols = _setup(sets_config(btag=FILES[name]), name)
    payload = observables_payload(plan)
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    got = fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
    ref = jax_reverse.chunk_pullback(cols, plan, theta, widths, payload)
    g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
    np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * np.abs(r).max())
    names = plan.trainable_names
    assert abs(r[names.index("b_min")]) > 0 and np.abs(r[7:]).max() > 0

    def loss(step: np.ndarray) -> float:
        st = jax_reverse.chunk_pullback(cols, plan, theta + step, widths, payload)
        return float(pulled_sum(st.derived.value, payload))

    idx = np.asarray(plan.trainable)
    v = np.random.default_rng(4).normal(size=len(names))
    v /= np.linalg.norm(v)
    b = np.zeros(len(names))
    b[names.index("b_min")] = 1.0
    for d, h in ((v, 1e-5), (b, 1e-5)):
        step = np.zeros_like(theta)
        step[idx] = h * d
        fd = (loss(step) - loss(-step)) / (2 * h)
        np.testing.assert_allclose(g @ d, fd, rtol=1e-6, atol=1e-9 * np.abs(g).max())


def test_one_set_with_observables_read_takes_the_walks_vjp() -> None:
    """One collection, one set (the chain's case) with a payload that reads its field's
    and an event score's moments: the general walk's vector-Jacobian product, equal to
    the JAX sweep (1e-10)."""
    config = config_from_dict(score_config(hidden=(3,)))
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names], np.float64)
    widths = np.array(initial_widths(config), np.float64)
    cols = read_columns(SHARED_DATA / "nano_tt_v12.root", plan)
    assert fastreverse._tables(scorecols.bare(plan)).one_set
    payload = [None if n == "observables.ht.moments" else e  # an event sum: not read
               for n, e in zip(state_names(scorecols.bare(plan)), observables_payload(plan),
                               strict=True)]
    got = fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
    ref = jax_reverse.chunk_pullback(cols, plan, theta, widths, payload)
    g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
    assert np.abs(r).max() > 0
    np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * np.abs(r).max())


def test_empty_and_tiny_chunks() -> None:
    """Chunks of 0, 1 and 3 events (objects absent, one block): the numba pullback with
    observables read equals the JAX sweep."""
    from tests.chunked_helpers import slice_columns

    plan, theta, widths, cols = _setup(sets_config(), "nano_tt_v12.root")
    payload = observables_payload(plan)
    for a, b in ((0, 0), (3, 4), (10, 13)):
        part = slice_columns(cols, a, b)
        got = fastreverse.chunk_pullback(part, plan, theta, widths, payload)
        ref = jax_reverse.chunk_pullback(part, plan, theta, widths, payload)
        g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * max(np.abs(r).max(), 1.0))
        assert got.events == b - a
