"""Objects that a width-0 cut removes from every root set leave before the pattern
probabilities (:mod:`analysis.pipeline.hardcut`; issue 33 item 1).

References: the numpy oracle of tests/pipeline/test_event_sum_multiplicities.py (every
configuration of the uncertain pass bits) for the histogram of ``sum(jets.pt)``, numpy
comparisons for the survivors, and the same numba pass with every object kept (bit for
bit: a removed object's step is ``1 F + 0``, its fill ``+ 0``).
"""

from __future__ import annotations

import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.pipeline import hardcut
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.numba import fasthist
from analysis.pipeline.plan import build_plan
from tests.data.test_caps_count_hard_cut_survivors import capped, extract
from tests.pipeline.test_event_sum_multiplicities import (
    PRE,
    SOFT,
    WIDTH,
    built_events,
    columns,
    config,
    oracle,
)

THETA, WIDTHS = np.array([SOFT]), np.array([0.0, 0.0, WIDTH])


@pytest.fixture
def walked(monkeypatch) -> list[int]:
    """The objects of ``Jet`` that each numba walk's pattern probabilities see."""
    seen: list[int] = []
    real = fasthist.patterns_into

    def spy(tab, coff, *args) -> None:
        seen.append(int(coff[tab.collections.index("Jet"), -1]))
        real(tab, coff, *args)

    monkeypatch.setattr(fasthist, "patterns_into", spy)
    return seen


def test_survivors_are_the_objects_past_every_width0_cut() -> None:
    plan = build_plan(config_from_dict(config()))
    built = built_events(True)
    counts, flat = columns(built).collections["Jet"]
    want = (flat["pt"] > PRE) & (np.abs(flat["eta"]) < 2.4)
    for kw in ({}, {"theta": THETA, "widths": WIDTHS}):
        keep = hardcut.survivors(plan, "Jet", flat, int(counts.sum()), **kw)
        np.testing.assert_array_equal(keep, want)
    # at width 0 the soft cut removes too (at this point), the configured reading not
    keep = hardcut.survivors(plan, "Jet", flat, int(counts.sum()), theta=THETA,
                             widths=np.zeros(3))
    np.testing.assert_array_equal(keep, want & (flat["pt"] > SOFT))
    # no width-0 cut: nothing to remove
    soft = build_plan(config_from_dict(config(pre=False)))
    assert hardcut.survivors(soft, "Jet", flat, int(counts.sum())) is None


def test_thirty_jets_of_which_eight_pass_walk_eight_and_equal_the_oracle(walked) -> None:
    built = built_events(False)  # 30 jets with 8 past the pre-selection, 5, 12
    cols = columns(built)
    assert cols.collections["Jet"][0].tolist() == [30, 5, 12]
    plan = build_plan(config_from_dict(config()))
    state = chunk_state(cols, plan, THETA, WIDTHS, order=0)  # the numba kernel
    # only the survivors reach the pattern probabilities: 8 + 0 + 7
    assert walked == [15], walked
    assert state.enumeration == (3, 0, 8)  # the cheap path: 8 uncertain objects
    want = oracle(built)
    h = state.derived.value["histograms"]["ht"]
    np.testing.assert_allclose(np.asarray(h.sumw_flow), want[0], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.asarray(h.sumw2_flow), want[1], rtol=1e-10, atol=1e-14)


def test_dropping_changes_no_bit(monkeypatch) -> None:
    cols = columns(built_events(True))
    plan = build_plan(config_from_dict(config()))
    got = chunk_state(cols, plan, THETA, WIDTHS, order=1)
    monkeypatch.setattr(fasthist.hardcut, "compact", lambda c, *_: c)
    ref = chunk_state(cols, plan, THETA, WIDTHS, order=1)
    for tree in ("value", "jac"):
        a = getattr(got.derived, tree)["histograms"]["ht"]
        b = getattr(ref.derived, tree)["histograms"]["ht"]
        np.testing.assert_array_equal(np.asarray(a.sumw_flow), np.asarray(b.sumw_flow))
        np.testing.assert_array_equal(np.asarray(a.sumw2_flow), np.asarray(b.sumw2_flow))


def test_a_cap_of_12_takes_15_jets_of_which_10_pass_the_hard_cuts(walked) -> None:
    rng = np.random.default_rng(12)
    pt = rng.permutation(np.concatenate([rng.uniform(35.0, 110.0, 10),
                                         rng.uniform(5.0, 29.0, 5)]))
    built = [{"pt": pt, "eta": rng.uniform(-2.3, 2.3, 15), "weight": 1.3}]
    cfg = capped(12)
    cols = extract(cfg, built)  # runs: 10 of the 15 count
    assert cols.collections["Jet"][0].tolist() == [15]
    state = chunk_state(cols, build_plan(config_from_dict(cfg)), THETA, WIDTHS, order=0)
    assert walked == [10] and state.enumeration == (1, 0, 10)
    want = oracle(built)
    h = state.derived.value["histograms"]["ht"]
    np.testing.assert_allclose(np.asarray(h.sumw_flow), want[0], rtol=1e-10, atol=1e-14)


# --- one definition of "uncertain" on both backends (analysis.select.certain) ----------


def _btag_config() -> dict:
    cfg = config()
    cfg["parameters"]["btag_min"] = {"init": 0.3, "bounds": [0.05, 0.95]}
    cfg["objects"]["bjets"] = {"from": "jets", "cuts": [
        {"var": "btagDeepFlavB", "op": ">", "param": "btag_min", "width": 0.05}]}
    cfg["selection"].append({"count": "bjets", "op": ">=", "value": 1})
    return cfg


def _btag_events(n_soft: list[int], n_hard: list[int]):
    """Events of ``n_soft`` jets uncertain in ``jets`` (pT near the soft cut) and
    ``n_hard`` jets certain in it (pT 400+: the sigmoid saturates) with an uncertain
    b-tag, as columns."""
    rng = np.random.default_rng(5)
    pts, n = [], []
    for a, b in zip(n_soft, n_hard, strict=True):
        pts.append(rng.permutation(np.concatenate([rng.uniform(35.0, 110.0, a),
                                                   rng.uniform(400.0, 500.0, b)])))
        n.append(a + b)
    counts = np.array(n, np.int64)
    pt = np.concatenate(pts)
    flat = {"pt": pt, "eta": rng.uniform(-2.3, 2.3, pt.size),
            "btagDeepFlavB": rng.uniform(0.1, 0.5, pt.size)}
    from analysis.pipeline.layout import ChunkColumns
    return ChunkColumns(n_events=len(n), weight=rng.uniform(0.5, 2.0, len(n)),
                        collections={"Jet": (counts, flat)})


def _btag_inputs():
    from analysis.pipeline.plan import initial_widths

    c = config_from_dict(_btag_config())
    plan = build_plan(c)
    theta = np.array([c.initial_params()[n] for n in plan.param_names])
    return plan, theta, np.array(initial_widths(c))


@pytest.mark.slow_on("jax")
def test_both_backends_count_the_same_uncertain_objects() -> None:
    # event 0: 8 jets uncertain in jets, 18 certain in jets with an uncertain b-tag
    # (decided for sum(jets.pt): folded, not enumerated); the JAX kernel counted 26
    plan, theta, widths = _btag_inputs()
    cols = _btag_events([8, 3, 0], [18, 2, 4])
    numba = chunk_state(cols, plan, theta, widths, order=1)
    jax_ = chunk_state(cols, plan, theta, widths, order=1, backend="jax")
    assert numba.enumeration == jax_.enumeration == (3, 0, 8)
    for tree in ("value", "jac"):
        a = getattr(numba.derived, tree)["histograms"]["ht"]
        b = getattr(jax_.derived, tree)["histograms"]["ht"]
        assert np.asarray(a.sumw_flow).any()
        np.testing.assert_allclose(np.asarray(a.sumw_flow), np.asarray(b.sumw_flow),
                                   rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(np.asarray(a.sumw2_flow), np.asarray(b.sumw2_flow),
                                   rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("backend_name", ["numba", "jax"])
def test_both_backends_refuse_at_the_same_event(backend_name) -> None:
    from analysis.errors import InputError

    plan, theta, widths = _btag_inputs()
    # event 0: 20 uncertain (runs), event 1: 25 uncertain beside 10 decided ones
    cols = _btag_events([20, 25, 2], [10, 10, 1])
    with pytest.raises(InputError) as err:
        chunk_state(cols, plan, theta, widths, order=0, backend=backend_name)
    msg = str(err.value)
    assert "event 1 of this chunk has 25 uncertain Jet objects" in msg, msg
