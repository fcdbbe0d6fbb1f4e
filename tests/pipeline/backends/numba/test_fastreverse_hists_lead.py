"""Reverse mode on numba for payloads that read histograms of leading objects
(analysis.pipeline.backends.numba._revhistlead): ``jets[0].pt`` (hard bins, also a
likelihood template in a channel region with a shift of the jets' pT and a weight
variation), ``bjets[1].pt`` (soft bins, trainable edges, a set with its parent) and
``abs(jets[0].eta)`` (soft bins), beside the histograms of fields and branches, the
yields, the observables and a trainable count threshold, on real files (ttbar 2015 and
NanoAOD v12). The numba pullback equals the JAX sweep (1e-10: gradient and value states)
and central differences of the JAX kernel's pulled sum."""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import pytest

from analysis.pipeline.backends.jax import reverse as jax_reverse
from analysis.pipeline.backends.numba import fastreverse
from tests.chunked_helpers import slice_columns
from tests.conftest import numba_refusal
from tests.pipeline.backends.numba.test_fastreverse_hists import (
    TINY_SPANS,
    check,
    hists_config,
    hists_payload,
    setup,
    state_paths,
    threads_and_tiny_chunks,
)
from tests.pipeline.backends.numba.test_fastreverse_sets import FILES, zero_filled


def lead_config(*, btag: str = "btagDeepFlavB") -> dict:
    """:func:`tests.pipeline.backends.numba.test_fastreverse_hists.hists_config` with
    histograms of leading objects, one of them a channel's template in a region."""
    cfg = hists_config(btag=btag)
    cfg["histograms"] += [
        {"name": "j0", "x": "jets[0].pt", "edges": [20.0, 40.0, 60.0, 100.0, 200.0, 400.0]},
        {"name": "b1", "x": "bjets[1].pt", "bins": {"n": 4, "lo": 20.0, "hi": 220.0},
         "width": 10.0, "trainable_edges": True},
        {"name": "a0", "x": "abs(jets[0].eta)", "edges": [0.0, 0.8, 1.6, 2.4], "width": 0.1},
    ]
    cfg["likelihood"]["channels"]["lead"] = {"histogram": "j0", "selection": [
        {"count": "bjets", "op": ">=", "value": 2}]}
    return cfg


# slow on every file (v12: ~50-150 s of JAX sweep compiles on 2 cores); the default suite
# keeps numba = JAX sweep on each template alone and on hard widths and tiny chunks below
@pytest.mark.slow
@pytest.mark.parametrize("name", list(FILES))
def test_leading_histograms_equal_the_jax_sweep(name: str) -> None:
    """Every histogram and template read, those of leading objects among them: the
    numba pullback equals the JAX sweep and central differences (a random direction, a
    trainable edge of ``bjets[1].pt``), each selection walked once."""
    plan, theta, widths, cols = setup(lead_config(btag=FILES[name]), name)
    payload = hists_payload(cols, plan, theta, widths)
    g = check(cols, plan, theta, widths, payload, fd=("b1.edges[2]",))
    names = plan.trainable_names
    for n in ("b1.edges[1]", "b1.edges[3]", "n_min", "b_min"):
        assert abs(g[names.index(n)]) > 0, n
    trace: Counter = Counter()
    fastreverse.chunk_pullback(cols, plan, theta, widths, payload, trace=trace)
    sides = [None] + [(s.key, s.factor) for s in plan.shifts]
    assert trace == Counter({(side, r): 1 for side in sides for r in (0, 1, 2)})


def tiny_payload(cols, plan, theta, widths) -> list:
    """The payload of :func:`test_hard_widths_tiny_chunks_and_threads`: the histograms'
    and the leading template's (its shift sides, weight variations) cotangents, the
    rest None."""
    return [e if n.startswith(("templates.lead", "histograms.")) else None
            for n, e in zip(state_paths(plan), hists_payload(cols, plan, theta, widths,
                                                             seed=2), strict=True)]


@pytest.mark.parametrize("only", ["templates.lead", "histograms.j0", "histograms.b1",
                                  "histograms.a0"])
def test_each_leading_histogram_alone(only: str) -> None:
    """One leading object's histogram read at a time (a template in a channel region:
    with its shift sides and weight variations), nothing else: the numba pullback equals
    the JAX sweep (a share that cancels elsewhere cannot hide). On the 3-event chunk of
    :data:`TINY_SPANS` (the histograms and the region filled there: asserted), the JAX
    sweep's payload :func:`tiny_payload`'s tree (the other histograms' cotangents 0: the
    same gradient), so that every case shares
    :func:`test_hard_widths_tiny_chunks_and_threads`' one compile (the whole file was a
    compile each, ~40 s CPU cold)."""
    plan, theta, widths, cols = setup(lead_config(), "nano_tt_v12.root")
    payload = hists_payload(cols, plan, theta, widths, seed=1, only=only)
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    tree = tiny_payload(cols, plan, theta, widths)
    filled = [e if e is not None or t is None else zero_filled([None], [t])[0]
              for e, t in zip(payload, tree, strict=True)]
    assert [e is None for e in filled] == [t is None for t in tree]
    part = slice_columns(cols, *TINY_SPANS[2])
    got = fastreverse.chunk_pullback(part, plan, theta, widths, payload)
    ref = jax_reverse.chunk_pullback(part, plan, theta, widths, filled)
    g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
    assert np.abs(r).max() > 1e-6  # the case survives the slice
    np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * np.abs(r).max())
    hist = only.split(".")[1].split(":")[0]
    for key, h in ref.derived.value[only.split(".")[0]].items():
        if key.split(":")[0] == hist:  # every side and variation filled in the 3 events
            assert np.abs(np.asarray(h.sumw_flow)).max() > 0, key


def test_hard_widths_tiny_chunks_and_threads() -> None:
    """Every width 0 and chunks of 0, 1 and 3 events: the numba pullback equals the JAX
    sweep; 1 and 3 threads give the same bits."""
    plan, theta, widths, cols = setup(lead_config(), "nano_tt_v12.root")
    threads_and_tiny_chunks(cols, plan, theta, widths, tiny_payload(cols, plan, theta, widths),
                            spans=TINY_SPANS)


def test_leading_and_event_sum_histograms_served() -> None:
    """A histogram of a leading object, candidate tuples of one set or an event sum is
    served in a pullback pass, as one of two sets of two collections or of one; one whose
    expression indexes three sets is refused (named)."""
    cfg = hists_config(likelihood=False)
    for x, served in (("jets[1].pt", True), ("sum(jets.pt)", True), ("count(bjets)", True),
                      ("mass(jets[0] + jets[1])", True), ("mass(jets[0] + muons[0])", True),
                      ("mass(jets[0] + bjets[0])", True),
                      ("pt(jets[0] + bjets[0] + muons[0])", False)):
        c = copy.deepcopy(cfg)
        c["histograms"].append({"name": "other", "x": x, "edges": [0.0, 100.0, 300.0]})
        plan, theta, _, _ = setup(c, "nano_tt_v12.root")
        why = numba_refusal(plan, 0, theta, pullback=[None] * len(state_paths(plan)))
        assert (why is None) == served, why
        assert served or "'other'" in why, why
