"""``max_objects`` counts only the objects a hard pre-selection leaves (issue 33 item 1).

An object that fails a width-0 cut with a constant threshold is out of every set at
every parameter point: it never enters an enumeration, a candidate tuple or a bound,
so it does not count toward ``objects.<set>.max_objects`` either, while the chunk's
columns still hold every object. References: the oracle of
tests/pipeline/test_event_sum_multiplicities.py (every configuration of the uncertain
pass bits) for the histogram, and numpy counts of the objects past the cuts.
"""

from __future__ import annotations

import dataclasses

import awkward as ak
import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.data.columns import extract_columns
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.histplan import ShiftSpec
from analysis.pipeline.plan import build_plan
from analysis.select.objects import ObjectCapError
from tests.pipeline.test_event_sum_multiplicities import (
    PRE,
    SOFT,
    WIDTH,
    built_events,
    config,
    oracle,
)


def capped(cap: int, *, soft_pre: bool = False) -> dict:
    cfg = config()
    jets = cfg["objects"]["jets"]
    jets["max_objects"] = cap
    if soft_pre:  # the pre-selection's pT cut soft: no object is out for certain
        jets["cuts"][1]["width"] = 1.0
    return cfg


def events(built: list[dict]) -> ak.Array:
    jets = ak.zip({f: ak.Array([e[f] for e in built]) for f in ("pt", "eta")})
    return ak.zip({"Jet": jets, "genWeight": np.array([e["weight"] for e in built])},
                  depth_limit=1)


def extract(cfg: dict, built: list[dict], shift: float | None = None):
    plan = build_plan(config_from_dict(cfg))
    if shift is not None:  # the plan of a `type: shift` systematic on Jet.pt, both sides
        plan = dataclasses.replace(plan, shifts=(ShiftSpec("jes", "up", "Jet:pt", shift),
                                                 ShiftSpec("jes", "down", "Jet:pt", 1 / shift)))
    return extract_columns(events(built), plan, weight_branch="genWeight", source="built.root")


# JAX: its 30-jet event-sum enumeration compiles for a minute from a cold cache; the JAX
# backend against the same oracle in the default run:
# tests/pipeline/test_event_sum_multiplicities.py (built events of 30 jets, both backends)
@pytest.mark.slow_on("jax")
def test_thirty_jets_of_which_eight_pass_the_hard_cut_run_under_a_cap_of_12(backend) -> None:
    built = built_events(False)  # 30 jets with 8 past the pre-selection, 5, 12
    assert max(len(e["pt"]) for e in built) == 30
    cfg = capped(12)
    cols = extract(cfg, built)
    counts, flat = cols.collections["Jet"]
    assert counts.tolist() == [30, 5, 12] and flat["pt"].size == 47  # every object kept
    plan = build_plan(config_from_dict(cfg))
    theta, widths = np.array([SOFT]), np.array([0.0, 0.0, WIDTH])
    want = oracle(built)
    st = chunk_state(cols, plan, theta, widths, order=0, backend=backend)
    h = st.derived.value["histograms"]["ht"]
    np.testing.assert_allclose(np.asarray(h.sumw_flow), want[0], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.asarray(h.sumw2_flow), want[1], rtol=1e-10, atol=1e-14)


def test_a_real_limit_is_one_line_naming_the_survivors_and_the_key() -> None:
    built = built_events(True)  # the fourth event: 14 of its 30 jets past the cuts
    past = [int(np.sum((e["pt"] > PRE) & (np.abs(e["eta"]) < 2.4))) for e in built]
    assert past == [8, 0, 7, 14]
    with pytest.raises(ObjectCapError) as err:
        extract(capped(13), built)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg == ("built.root: collection 'Jet': event 3 has 14 objects past the width-0 "
                   "cuts (of 30), more than max_objects=13; raise objects.jets.max_objects"), msg
    extract(capped(14), built)  # at the limit: runs


def test_a_shift_or_a_soft_cut_keeps_an_object_counted() -> None:
    built = built_events(False)
    pt = built[0]["pt"]
    # a jet just under the pre-selection passes it when the shift raises its pT 5%
    below = (pt < PRE) & (pt * 1.05 > PRE) & (np.abs(built[0]["eta"]) < 2.4)
    if not below.any():
        i = int(np.argmin(np.where(pt < PRE, PRE - pt, np.inf)))
        pt[i] = PRE - 0.5
    extract(capped(8), built)
    with pytest.raises(ObjectCapError, match="event 0 has 9 objects past the width-0 cuts"):
        extract(capped(8), built, shift=1.05)
    # a soft pre-selection: every jet can pass, every jet counts (the message of a cap
    # on all objects)
    with pytest.raises(ObjectCapError, match="event 0 has 30 objects, more than max_obj"):
        extract(capped(12, soft_pre=True), built)
