"""The validation split: deterministic per event, disjoint, complete, of the asked size.

References: the events and weights are read with uproot (none of our code); each
part's sum of weights times its factor (``fraction`` held out, ``1 - fraction``
training) must add up to the file's sum of weights, and the parts' event counts to
the number of events (an event in both parts, or in neither, breaks both).
"""

from __future__ import annotations

import numpy as np
import pytest
import uproot

from analysis.driver.runner import Evaluator
from analysis.pipeline.split import entry_uniform, event_uniform, part_factor
from tests import opt_helpers as H

F = 0.3
LOOSE = {"jet_pt_min": 15.0, "jet_abs_eta_max": 4.7, "btag_min": 0.0, "min_jets": 1}


def _numpy_sums(small_data):
    out = {}
    for name in ("ttbar", "dy"):
        w = np.concatenate([
            uproot.open(p)["Events"]["genWeight"].array(library="np").astype(np.float64)
            for p in sorted((small_data / name).glob("*.root"))])
        out[name] = (len(w), float(w.sum()))
    return out


def _parts(small_data, *, unit: bool, **executor):
    """{part: {dataset: (sumw, selected_sumw)}} of one Evaluator (hard loose cuts)."""
    cfg = H.make_config(small_data, executor={**{"type": "iterative"}, **executor})
    out = {}
    with Evaluator(cfg) as ev:
        for part in ("all", "train", "held_out"):
            ev.part = None if part == "all" else (part, F)
            st = ev.run(LOOSE, widths=np.zeros(4), order=0, unit_weights=unit)
            out[part] = {n: (s.sumw, float(s.derived.value["selected_sumw"])) for n, s in st.items()}
    return out


@pytest.fixture(scope="module")
def counts(small_data):
    return _parts(small_data, unit=True)


def test_parts_are_disjoint_and_cover_every_event(small_data, counts):
    ref = _numpy_sums(small_data)
    for name, (n_events, _) in ref.items():
        n_train = counts["train"][name][0] * (1 - F)
        n_held = counts["held_out"][name][0] * F
        assert n_train == pytest.approx(round(n_train), abs=1e-6)
        assert n_held == pytest.approx(round(n_held), abs=1e-6)
        assert round(n_train) + round(n_held) == n_events
        # the held-out fraction within 3 binomial standard deviations
        assert abs(n_held / n_events - F) < 3 * np.sqrt(F * (1 - F) / n_events)


def test_weighted_parts_add_up_to_the_file_sums(small_data):
    ref = _numpy_sums(small_data)
    parts = _parts(small_data, unit=False)
    for name, (_, sumw) in ref.items():
        assert parts["all"][name][0] == pytest.approx(sumw, rel=1e-12)
        total = parts["train"][name][0] * (1 - F) + parts["held_out"][name][0] * F
        assert total == pytest.approx(sumw, rel=1e-12)
        sel = parts["train"][name][1] * (1 - F) + parts["held_out"][name][1] * F
        assert sel == pytest.approx(parts["all"][name][1], rel=1e-12)


@pytest.mark.parametrize("executor", [
    {"chunksize": 700},
    pytest.param({"type": "futures", "workers": 2}, marks=pytest.mark.slow),  # ~40 s: processes
])
def test_split_is_the_same_for_every_chunking_and_executor(small_data, counts, executor):
    other = _parts(small_data, unit=True, **executor)
    for part in ("train", "held_out"):
        for name in ("ttbar", "dy"):
            assert other[part][name] == pytest.approx(counts[part][name], rel=1e-12)


def test_uid_depends_on_the_event_only():
    run, lumi, event = np.ones(10, np.uint32), np.arange(10, dtype=np.uint32), np.arange(10) + 7
    u = event_uniform(run, lumi, event)
    assert np.array_equal(u[3:], event_uniform(run[3:], lumi[3:], event[3:]))
    assert len(set(u.tolist())) == 10 and np.all((u >= 0) & (u < 1))
    e = entry_uniform("file-a", np.arange(100))
    assert np.array_equal(e[40:], entry_uniform("file-a", np.arange(40, 100)))
    assert not np.array_equal(e, entry_uniform("file-b", np.arange(100)))


def test_uid_is_uniform():
    """Kolmogorov-Smirnov against the uniform distribution (scipy) on consecutive ids."""
    from scipy import stats

    n = 20000
    u = event_uniform(np.ones(n), 1 + np.arange(n) // 1000, np.arange(n) + 1)
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    assert stats.kstest(entry_uniform("x", np.arange(n)), "uniform").pvalue > 1e-3


def test_part_factor():
    u = np.array([0.0, 0.29, 0.3, 0.9])
    assert part_factor(u, "held_out", F).tolist() == [1 / F, 1 / F, 0.0, 0.0]
    assert part_factor(u, "train", F).tolist() == [0.0, 0.0, 1 / (1 - F), 1 / (1 - F)]
    assert part_factor(u, "all", F).tolist() == [1.0] * 4
