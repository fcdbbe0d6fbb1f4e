"""The events' uid (three more branches: run, luminosityBlock, event) is read only by a
pass that can use it (processors.diff_processor): a validation split, bootstrap
replicas or the column cache. Without the cache, a split pass still reads it and weighs
the same as with the cache (the reference: the cached pass, whose columns always hold
it); a plain pass does not compute it."""

from __future__ import annotations

import numpy as np

import analysis.data.columns as columns
from analysis.driver.runner import Evaluator
from tests import opt_helpers as H

LOOSE = {"jet_pt_min": 15.0, "jet_abs_eta_max": 4.7, "btag_min": 0.0, "min_jets": 1}


def _selected(ev, part):
    ev.part = part
    st = ev.run(LOOSE, widths=np.zeros(4), order=0)
    return {n: float(s.derived.value["selected_sumw"]) for n, s in st.items()}


def test_uid_read_only_where_a_pass_uses_it(small_data, monkeypatch) -> None:
    calls = []
    real = columns._event_uid

    def counted(events, meta, n):
        calls.append(n)
        return real(events, meta, n)

    monkeypatch.setattr(columns, "_event_uid", counted)
    cfg = H.make_config(small_data, executor={"type": "iterative"})
    with Evaluator(cfg) as ev:
        want = _selected(ev, ("train", 0.3))
    with Evaluator(cfg, cache=False) as ev:
        ev.validate_columns()
        calls.clear()
        plain = _selected(ev, None)
        assert calls == []  # no split, no cache: the ids are not read
        got = _selected(ev, ("train", 0.3))
        assert calls  # the split reads them
    assert got == want
    assert got != plain  # the split weighs a part only (scaled up)


def test_replicas_without_the_cache_read_the_uid(small_data) -> None:
    """A bootstrap pass draws each event's Poisson weights from its uid: without the
    column cache it reads the ids itself and gives the cached pass's replicas (whose
    columns always hold the ids; test_replicas checks those against the files' table)."""
    cfg = H.make_config(small_data, executor={"type": "iterative"})
    with Evaluator(cfg) as ev:
        want = ev.run_replicas(LOOSE, widths=np.zeros(4), replicas=5)
    with Evaluator(cfg, cache=False) as ev:
        got = ev.run_replicas(LOOSE, widths=np.zeros(4), replicas=5)
    for name, sums in want.items():
        assert np.any(sums.sums != 0)
        np.testing.assert_array_equal(got[name].sums, sums.sums)
