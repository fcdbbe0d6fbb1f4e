"""Histograms of event sums on the numba kernel (analysis.pipeline.backends.numba.kernels._numba_esum, through
analysis.pipeline.backends.numba.fasthist).

- The compiled kernel alone on events of 24 jets with 13, 17, 20 and 9 uncertain
  objects (one of them decided in the summed set: 12, 16, 19 and 8 enumerated) (tests/select/test_subsets_uncertain.py's events: joint counts of jets,
  nested b-jets and leptons, certain objects in and out of the set) against the
  enumeration oracle over every configuration of the uncertain bits (1e-10), its
  tangents against central differences of the oracle (1e-8), and the values against the
  JAX reference :func:`analysis.select.subsets.sum_bins` (1e-12).
- Whole plans (event sums of a set and of a nested set, ``count``, negative values, in channel
  regions with shift and weight variations, beside per-object and leading histograms)
  against the JAX kernel, values and Jacobians, 1e-12.
"""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.numba._fasttables import _targets
from analysis.pipeline.backends.numba.kernels import _numba_esum, _numba_esum_fill
from analysis.select._recursions import _pass_table, _pattern_probs
from analysis.select.certain import certain_objects
from analysis.select.lanes.policy import compiled
from analysis.select.subsets import sum_bins
from tests.pipeline.backends.numba.test_fasthist import CONFIG, columns, compare
from tests.pipeline.backends.numba.test_fastkernel import make_plan
from tests.select.test_subsets_uncertain import (
    EDGES,
    MODEL,
    THRESH,
    UNCERTAIN,
    M,
    _moved,
    events,
    inputs,
    oracle,
)

LANES = _numba_esum.LANES


def kernel_bins(ev: dict, tangents: list[tuple[int, int]], name: str = "jets",
                kernel=None) -> tuple[np.ndarray, np.ndarray]:
    """``(bins (E, nb, 1 + len(tangents)), uncertain (E,))`` from the compiled kernel (or
    ``kernel``) for the sum of the pT of the set ``name``, the tangent lanes d/d
    ``ev["jets"][e, j]`` for each ``(e, j)`` of ``tangents``."""
    n_ev = len(UNCERTAIN)
    edges = np.asarray(EDGES, np.float64)
    nl = 1 + len(tangents)
    out = np.full((n_ev, len(edges) + 1, max(4, nl)), 7.0)
    unc = np.zeros(n_ev, np.int64)
    args = (*kernel_inputs(ev, tangents, name), edges, 0.0, np.zeros(len(edges), np.int64), nl,
            n_ev, out, unc)
    if kernel is None:
        # the pipeline's build (SLP on, the pipeline's argument types): the one in numba's
        # cache, which a direct call (a build of its own, keyed apart) would compile again
        kernel = compiled(_numba_esum.event_sum_bins, args)
    kernel(*args, 0, 1)
    return out[..., :nl], unc


def kernel_inputs(ev: dict, tangents: list[tuple[int, int]], name: str = "jets") -> tuple:
    """The event-sum kernels' arguments before the edges (those of
    :func:`analysis.pipeline.backends.numba.kernels._numba_esum.event_sum_bins`) for the
    events ``ev`` and the sum of the pT of the set ``name``, the tangent lanes d/d
    ``ev["jets"][e, j]`` for each ``(e, j)`` of ``tangents`` (lanes 1, 2, ...)."""
    lays, probs, pt = inputs(ev)
    n_ev = len(UNCERTAIN)
    cols = MODEL.collections
    pv, pd = [], []
    for c in cols:
        v = np.asarray(_pattern_probs(MODEL, probs, lays, c))
        d = np.zeros(v.shape + (LANES,))
        for lane, (e, j) in enumerate(tangents, start=1):
            t = {k: jnp.zeros_like(x) for k, x in probs.items()}
            t["jets"] = t["jets"].at[e, j].set(1.0)
            d[..., lane] = np.asarray(jax.jvp(
                lambda p, c=c: _pattern_probs(MODEL, p, lays, c), (probs,), (t,))[1])
        pv.append(v.reshape(-1, v.shape[-1]))
        pd.append(d.reshape(-1, v.shape[-1], LANES))
    p_max = max(x.shape[1] for x in pv)
    pv_all = np.concatenate([np.pad(x, ((0, 0), (0, p_max - x.shape[1]))) for x in pv])
    pv_all = np.ascontiguousarray(np.repeat(pv_all[..., None], 2, axis=-1))
    pd_all = np.concatenate([np.pad(x, ((0, 0), (0, p_max - x.shape[1]), (0, 0))) for x in pd])
    per_event = {"Jet": M, "Lep": 1}
    coff = np.array([np.arange(n_ev + 1) * per_event[c] for c in cols], np.int64)
    base = np.concatenate([[0], np.cumsum(coff[:, -1])]).astype(np.int64)
    n_pat = np.array([len(MODEL.patterns[c]) for c in cols], np.int64)
    tgt = _targets(MODEL, np.array(MODEL.shape, np.int64) - 1, cols)
    f = np.array(_pass_table(MODEL, THRESH)[0], np.float64)  # writable: the pipeline's types
    cs = cols.index("Jet")
    summed = [s.name for s in MODEL._sets_of["Jet"]].index(name)
    has = np.asarray(MODEL.patterns["Jet"])[:, summed].astype(np.int64)
    # which objects are certain: the one definition (as fasthist makes it)
    lo, n_pc = int(base[cs]), int(n_pat[cs])
    cert, ins = certain_objects(pv_all[lo: lo + int(coff[cs, -1]), :n_pc, 0], has[:n_pc] == 1)
    return (coff, base, pv_all, pd_all, n_pat, tgt, f, np.zeros(f.shape + (LANES,)), cs, has,
            cert, ins, np.array(pt, np.float64).reshape(-1))


def test_kernel_against_enumeration_and_the_jax_reference() -> None:
    ev = events()
    e = 1  # 17 uncertain objects: meet in the middle
    j = int(np.flatnonzero((ev["jets"][e] > 0) & (ev["jets"][e] < 1))[0])
    got, unc = kernel_bins(ev, [(e, j)])
    # the jet certain in ``jets`` whose b-tag is uncertain is folded (its membership in
    # the summed set is decided), on both kernels
    assert unc.tolist() == [u - 1 for u in UNCERTAIN]
    lays, probs, pt = inputs(ev)
    ref = np.asarray(jax.jit(sum_bins, static_argnames=("model", "name", "edges",
                                                        "n_uncertain"))(
        probs, lays, MODEL, THRESH, pt, "jets", EDGES, n_uncertain=20))
    for k in range(len(UNCERTAIN)):
        want = oracle(ev, k)
        assert want.sum() > 0.05
        np.testing.assert_allclose(got[k, :, 0], want, rtol=1e-10, atol=1e-14, err_msg=str(k))
        np.testing.assert_allclose(got[k, :, 0], ref[k], rtol=1e-12, atol=1e-15)
    h = 1e-3
    fd = (oracle(_moved(ev, [(e, j, h)]), e) - oracle(_moved(ev, [(e, j, -h)]), e)) / (2 * h)
    assert np.abs(fd).max() > 1e-3
    np.testing.assert_allclose(got[e, :, 1], fd, rtol=1e-8, atol=1e-10)
    assert np.all(got[np.arange(len(UNCERTAIN)) != e, :, 1] == 0.0)


def test_fewest_objects_that_reach_a_passing_state():
    """``_fewest``: the fewest objects (steps of any pattern of any collection from the
    empty state) that reach a state of nonzero pass value or tangent (the first ``nl``
    lanes); none reached: 2**62. The kernel gives an event of fewer objects exact zeros
    (the whole plans below compare those events' bins with the JAX kernel's)."""
    # one count capped at 4: pattern 0 keeps the state, pattern 1 adds one
    one = np.array([[[0, 1, 2, 3, 4], [1, 2, 3, 4, 4]]], np.int64)
    g0 = np.zeros((5, LANES))
    g0[4, 0] = 0.3
    n_pat = np.array([2], np.int64)
    assert _numba_esum._fewest(one, n_pat, g0, 1) == 4
    g0[2, 1] = -1e-300  # a tangent alone: read with 2 lanes, not with 1
    assert _numba_esum._fewest(one, n_pat, g0, 1) == 4
    assert _numba_esum._fewest(one, n_pat, g0, 2) == 2
    g0[4, 0] = np.nan  # NaN is not zero
    g0[2, 1] = 0.0
    assert _numba_esum._fewest(one, n_pat, g0, 1) == 4
    # a second collection whose one pattern adds two: state 4 in two objects
    two = np.array([one[0], [[2, 3, 4, 4, 4], [2, 3, 4, 4, 4]]], np.int64)
    assert _numba_esum._fewest(two, np.array([2, 1], np.int64), g0, 1) == 2
    assert _numba_esum._fewest(one, n_pat, np.zeros((5, LANES)), 4) == 2**62


def few_uncertain(counts: tuple[int, ...], seed: int = 11) -> dict:
    """Events as :func:`tests.select.test_subsets_uncertain.events` (24 jets, one lepton)
    with ``counts[e] - 1`` jets uncertain in ``jets``, each with an uncertain b-tag, and
    one more certain in ``jets`` with an uncertain b-tag (so ``counts[e]`` uncertain in
    ``bjets``); the others fail or pass for certain (odd events: one a certain b-jet)."""
    rng = np.random.default_rng(seed)
    qj = np.zeros((len(counts), M))
    qb = np.zeros_like(qj)
    for e, u in enumerate(counts):
        perm = rng.permutation(M)
        qj[e, perm[: u - 1]] = rng.uniform(0.05, 0.95, u - 1)
        qb[e, perm[: u - 1]] = rng.uniform(0.1, 0.9, u - 1)
        qj[e, perm[u - 1]] = 1.0
        qb[e, perm[u - 1]] = 0.6
        rest = perm[u:]
        qj[e, rest] = rng.integers(0, 2, len(rest))
        if e % 2:
            qj[e, rest[0]] = qb[e, rest[0]] = 1.0
    return {"jets": qj, "bjets": qb, "leps": np.full((len(counts), 1), 0.8),
            "pt": rng.uniform(15.0, 90.0, qj.shape)}


@pytest.mark.parametrize("name", ["jets", "bjets"])
def test_kernel_every_path_against_enumeration(name: str) -> None:
    """0 to 8 uncertain objects: every subset up to ENUMERATE_UP_TO (a sum over ``jets``:
    the out patterns move no count, so subsets carry the out objects as a scalar weight
    and the last object reads its value function; over ``bjets``: an object out of it
    may still be in ``jets``, one step per object), meet in the middle above; values
    against the enumeration oracle (1e-10), three tangent lanes against its central
    differences (1e-8)."""
    assert len(UNCERTAIN) == 4  # the helpers' number of events
    for counts in ((1, 2, 3, 4), (5, 6, 7, 8)):
        ev = few_uncertain(counts)
        # tangents of the first uncertain jet of two events and of the last of one (the
        # enumeration's last object; meet in the middle's second half)
        free = [np.flatnonzero((ev["jets"][e] > 0) & (ev["jets"][e] < 1)) for e in range(4)]
        lanes = [(1, int(free[1][0])), (3, int(free[3][0])), (3, int(free[3][-1]))]
        got, unc = kernel_bins(ev, lanes, name)
        assert unc.tolist() == [u - 1 if name == "jets" else u for u in counts]
        for e in range(len(counts)):
            want = oracle(ev, e, name)
            assert want.sum() > 0.01
            np.testing.assert_allclose(got[e, :, 0], want, rtol=1e-10, atol=1e-14,
                                       err_msg=f"{name} {counts} {e}")
        h = 1e-4
        for lane, (e, j) in enumerate(lanes, start=1):
            fd = (oracle(_moved(ev, [(e, j, h)]), e, name)
                  - oracle(_moved(ev, [(e, j, -h)]), e, name)) / (2 * h)
            assert np.abs(fd).max() > 1e-3
            np.testing.assert_allclose(got[e, :, lane], fd, rtol=1e-8, atol=1e-10,
                                       err_msg=f"{name} {counts} {e}")
            assert np.all(got[np.arange(len(counts)) != e, :, lane] == 0.0)


def test_dense_path_against_enumeration() -> None:
    """More than 3 tangents: every state and lane on the walk's 8-lane steps, meet in the
    middle for any number of uncertain objects (0 to 7 here, the first event none):
    values against the enumeration oracle (1e-10), five tangent lanes against its central
    differences (1e-8)."""
    for counts in ((1, 2, 3, 4), (5, 6, 7, 8)):
        ev = few_uncertain(counts)
        free = [np.flatnonzero((ev["jets"][e] > 0) & (ev["jets"][e] < 1)) for e in range(4)]
        lanes = [(1, int(free[1][0])), (2, int(free[2][0])), (3, int(free[3][0])),
                 (3, int(free[3][-1])), (2, int(free[2][-1]))]
        got, _ = kernel_bins(ev, lanes)
        for e in range(len(counts)):
            np.testing.assert_allclose(got[e, :, 0], oracle(ev, e), rtol=1e-10, atol=1e-14)
        h = 1e-4
        for lane, (e, j) in enumerate(lanes, start=1):
            fd = (oracle(_moved(ev, [(e, j, h)]), e) - oracle(_moved(ev, [(e, j, -h)]), e)) / (2 * h)
            np.testing.assert_allclose(got[e, :, lane], fd, rtol=1e-8, atol=1e-10)


@pytest.mark.slow
def test_no_index_out_of_bounds_on_any_path() -> None:
    """The kernel compiled with numba's bounds checks (an index out of bounds raises) on
    every path: 0 to 8 uncertain objects, 1 and 5 tangents, an event with a NaN
    probability; the same values as the kernel without the checks. (A buffer one row
    short, written past its end, corrupted the heap silently.)"""
    import numba

    checked = numba.njit(boundscheck=True)(_numba_esum.event_sum_bins.py_func)
    for counts in ((1, 2, 3, 4), (5, 6, 7, 8)):
        ev = few_uncertain(counts)
        ev["bjets"][2, int(np.argmax(ev["bjets"][2] > 0))] = np.nan
        free = [np.flatnonzero((ev["jets"][e] > 0) & (ev["jets"][e] < 1)) for e in range(4)]
        for lanes in ([(1, int(free[1][0]))], [(1, int(free[1][0]))] * 5):
            for name in ("jets", "bjets"):
                got, _ = kernel_bins(ev, lanes, name, kernel=checked)  # first: it raises
                want, _ = kernel_bins(ev, lanes, name)
                np.testing.assert_array_equal(got, want)


def esum_config(*, hard: bool = False) -> dict:
    cfg = copy.deepcopy(CONFIG)
    # a hard pre-selection under the soft cuts keeps the enumeration small
    cfg["objects"]["jets"]["cuts"].insert(0, {"var": "pt", "op": ">", "value": 22.0,
                                              "width": 0})
    if hard:
        for s in cfg["objects"].values():
            for c in s["cuts"]:
                c["width"] = 0.0
    cfg["histograms"] += [{"name": "ht", "x": "sum(jets.pt)", "edges": [0.0, 80.0, 150.0,
                                                                       250.0, 400.0]},
                          {"name": "nb", "x": "count(bjets)", "edges": [0.5, 1.5, 2.5]},
                          {"name": "bht", "x": "sum(bjets.pt)", "edges": [30.0, 90.0, 200.0]},
                          {"name": "seta", "x": "sum(jets.eta)", "edges": [-1.0, 0.0, 1.5]}]
    cfg["likelihood"]["channels"]["ht1"] = {
        "histogram": "ht", "selection": [{"count": "bjets", "op": ">=", "value": 1},
                                         {"var": "MET.pt", "op": "<", "value": 80.0,
                                          "width": 5.0}]}
    cfg["likelihood"]["channels"]["all"] = {"histogram": "bht"}
    return cfg


@pytest.mark.slow
@pytest.mark.parametrize("hard", [False, True])
def test_plans_with_event_sums_against_the_jax_kernel(hard: bool) -> None:
    plan, theta, widths = make_plan(esum_config(hard=hard))
    cols = columns(96, plan, seed=5)
    compare(plan, cols, theta, widths, order=1)
    # soft: up to 7 uncertain jets (one event meets in the middle); hard: none
    state = chunk_state(cols, plan, theta, widths, order=0, backend="numba")
    assert state.enumeration == (96, 0, 0 if hard else 7)


def test_event_sums_alone_take_each_region_yield_from_their_bins(monkeypatch) -> None:
    """Only event-sum histograms (in the selection and in a channel region, with a
    shift): no walk runs, each region's P(pass) is the sum of its bins,
    and values and Jacobians (the selected yield included) equal the JAX kernel's."""
    from analysis.pipeline.backends.numba import _histfills, fasthist

    cfg = esum_config()
    cfg["histograms"] = [h for h in cfg["histograms"] if h["x"].startswith(("sum(", "count("))]
    cfg["likelihood"]["channels"] = {
        "ht1": cfg["likelihood"]["channels"]["ht1"], "all": {"histogram": "bht"}}
    cfg["systematics"] = [s for s in cfg["systematics"] if s["name"] in ("jes", "bkg")]
    plan, theta, widths = make_plan(cfg)
    ran = []
    real = fasthist._run_dynamic

    def recorded(kernel, *args, **kw):
        ran.append(getattr(getattr(kernel, "py_func", kernel), "__name__", str(kernel)))
        return real(kernel, *args, **kw)

    for module in (fasthist, _histfills):  # the walk; the event sums' bins
        monkeypatch.setattr(module, "_run_dynamic", recorded)
    state = compare(plan, columns(96, plan, seed=5), theta, widths, order=1)
    assert "event_sum_bins" in ran and "walk" not in ran
    assert {"ht1", "all", "ht1:jes:up"} <= set(state.derived.value["templates"])


def test_bin_totals_add_the_bins_in_order():
    """A region's P(pass) from its bins: bin 0, then each other bin added in order (the
    floats of numpy's copy and adds over the strided slices), bit for bit, NaN and
    signed zeros included, into a view of a larger buffer."""
    rng = np.random.default_rng(5)
    bins = rng.random((300, 7, 4)) * 10.0 ** rng.integers(-8, 8, (300, 7, 4))
    bins[3, 2, 1] = np.nan
    bins[4, :, 0] = -0.0
    ref = bins[:, 0].copy()
    for b in range(1, bins.shape[1]):
        np.add(ref, bins[:, b], out=ref)
    out = np.full((2, 300, 4), 9.0)
    _numba_esum_fill.bin_totals(bins, out[1])
    np.testing.assert_array_equal(out[1].view(np.int64), ref.view(np.int64))
    assert np.all(out[0] == 9.0)


def test_fill_bins_sums_each_bin_in_event_order_whatever_the_bin_ranges():
    """The histogram sums of per-event bin probabilities against numpy (events in order,
    the product rule written out), bit for bit; a range of bins per call (one per thread:
    analysis.pipeline.backends.numba.fasthist) gives the same bits as one call over all."""
    rng = np.random.default_rng(3)
    n_ev, n_b, n_v, width = 200, 6, 2, 4
    pb = rng.random((n_ev, n_b, width))
    pb[rng.random((n_ev, n_b)) < 0.5] = 0.0  # bins an event does not reach
    ev = rng.random((n_ev, width))
    factors = rng.random((n_v, n_ev)) + 0.5
    weight = rng.normal(1.0, 0.5, n_ev)
    ref, ref2 = np.zeros((n_v, n_b, width)), np.zeros((n_v, n_b, width))
    for e in range(n_ev):
        w = pb[e] * ev[e, 0]
        w[:, 1:] = pb[e, :, :1] * ev[e, 1:] + ev[e, 0] * pb[e, :, 1:]
        for v in range(n_v):
            f = factors[v, e]
            ref[v] += f * w
            ref2[v] += f * f * weight[e] * w
    whole = [np.zeros((n_v, n_b, width)) for _ in range(2)]
    _numba_esum_fill.fill_bins(pb, ev, factors, weight, *whole, 0, n_b)
    np.testing.assert_array_equal(whole[0], ref)
    np.testing.assert_array_equal(whole[1], ref2)
    parts = [np.zeros((n_v, n_b, width)) for _ in range(2)]
    for lo, hi in ((0, 2), (2, 5), (5, n_b)):
        _numba_esum_fill.fill_bins(pb, ev, factors, weight, *parts, lo, hi)
    for a, b in zip(parts, whole, strict=True):
        np.testing.assert_array_equal(a.view(np.int64), b.view(np.int64))


def test_an_out_of_fewer_than_four_lanes_is_refused() -> None:
    """The sparse path adds four lanes per bin (``_add4``), whatever ``nl``: a narrower
    ``out`` (reverse mode's values-only pass gave it one lane) had those adds run past
    each row into the next event's bins, another thread's block (a lost update: 1 and 3
    threads gave other HT templates under load) and past the array's end (a corrupt
    heap). The production build refuses it."""
    ev = few_uncertain((1, 2, 3, 4))
    n_ev = len(UNCERTAIN)
    edges = np.asarray(EDGES, np.float64)
    for lanes in (1, 3):
        out = np.zeros((n_ev, len(edges) + 1, lanes))
        args = (*kernel_inputs(ev, [], "jets"), edges, 0.0, np.zeros(len(edges), np.int64), 1,
                n_ev, out, np.zeros(n_ev, np.int64))
        with pytest.raises(ValueError, match="at least 4 lanes"):
            compiled(_numba_esum.event_sum_bins, args)(*args, 0, 1)
