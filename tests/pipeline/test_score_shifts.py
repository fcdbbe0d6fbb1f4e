"""A shift of a learned score's input moves the score (issue 49: one meaning).

The meaning is the JAX kernel's values pass (the network inside, on the shifted
arrays): a shift side's score is the network of the shifted inputs. The numba values
pass, the numba pullback and the JAX sweep take the scores apart
(:mod:`analysis.pipeline.scorecols`: a column per shift side that scales an input);
here they are compared with that reference and with central differences of it, on the
shared NanoAOD v12 file: ``learned_binning.yaml``'s event score of MET under its MET
scale shift, and an object score of the jets' pT in the jets' cuts under a jet-pT shift
(:func:`tests.pipeline.backends.numba.test_fastreverse_hists.hists_config`). A shift of
a column no score reads adds no network evaluation.
"""

from __future__ import annotations

import copy

import jax
import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.pipeline import scorecols
from analysis.pipeline.backend import Backend, chunk_state
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.stats.pullback import pulled_sum
from tests.chunked_helpers import read_columns
from tests.conftest import SHARED_DATA
from tests.pipeline.backends.numba.test_fastreverse_hists import (
    hists_config,
    hists_payload,
    learned_binning,
    same_as_jax,
)

FILE = "nano_tt_v12.root"


def _setup(cfg: dict):
    config = config_from_dict(copy.deepcopy(cfg))
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names], np.float64)
    widths = np.array(initial_widths(config), np.float64)
    return plan, theta, widths, read_columns(SHARED_DATA / FILE, plan)


def _values(cols, plan, theta, widths, backend: str):
    return chunk_state(cols, plan, theta, widths, order=0, backend=Backend(backend)).derived.value


def test_an_object_scores_shifted_input_moves_it_on_numba(monkeypatch) -> None:
    """The jets' score (an input: ``jets.pt``) in the jets' cuts under the jets' pT
    shift: the numba values pass's templates of every shift side and region equal the
    JAX kernel's (network inside, 1e-10), soft and at width 0 (the hard pre-selection);
    the shifted templates differ from those with the nominal score (the score's cut
    moved)."""
    plan, theta, widths, cols = _setup(hists_config())
    for w in (widths, np.zeros_like(widths)):  # hard cuts: no jet a shifted score keeps leaves
        got, ref = (_values(cols, plan, theta, w, b)["templates"] for b in ("numba", "jax"))
        assert set(got) == set(ref)
        for key, h in ref.items():
            for a in ("sumw_flow", "sumw2_flow"):
                np.testing.assert_allclose(np.asarray(getattr(got[key], a)),
                                           np.asarray(getattr(h, a)), rtol=1e-10, atol=1e-12,
                                           err_msg=f"{key} {a}")
    # the score's cut moves with the shift: the nominal score on the shifted side (no
    # side columns) gives other templates
    monkeypatch.setattr(scorecols, "_sides", lambda plan, spec: [])
    stale = _values(cols, plan, theta, widths, "numba")["templates"]
    assert not np.allclose(np.asarray(stale["b2:jes:up"].sumw_flow),
                           np.asarray(ref["b2:jes:up"].sumw_flow), rtol=1e-6)


@pytest.mark.parametrize("only", [None, "templates.sr:met_scale"])
def test_a_pullback_through_a_shifted_score_input(only: str | None) -> None:
    """``learned_binning.yaml`` (an event score of MET, its MET scale shift) with a
    payload of every state, or of the shifted templates alone: the numba pullback equals
    the JAX sweep (1e-10) and central differences of the JAX kernel's values pass (the
    network inside, 1e-6) along a random direction and a score weight."""
    plan, theta, widths, cols = _setup(learned_binning())
    payload = hists_payload(cols, plan, theta, widths, seed=5, only=only)
    got, _ = same_as_jax(cols, plan, theta, widths, payload)
    g = np.asarray(got.derived.grad)
    names = plan.trainable_names
    w0 = next(i for i, n in enumerate(names) if n.startswith("score"))
    assert abs(g[w0]) > 0

    def loss(step: np.ndarray) -> float:
        return float(pulled_sum(_values(cols, plan, theta + step, widths, "jax"), payload))

    idx = np.asarray(plan.trainable)
    v = np.random.default_rng(6).normal(size=len(names))
    for d in (v / np.linalg.norm(v), np.eye(len(names))[w0]):
        h = 1e-5
        step = np.zeros_like(theta)
        step[idx] = h * d
        want = (loss(step) - loss(-step)) / (2 * h)
        np.testing.assert_allclose(g @ d, want, rtol=1e-6, atol=1e-8 * np.abs(g).max())


def test_a_shift_no_score_reads_adds_no_network_evaluation(monkeypatch) -> None:
    """One network evaluation per score and chunk where no shift scales its inputs (the
    MET shift moved to the jets' pT), three with the MET shift's two sides (their
    columns beside the nominal one); the numba values pass evaluates no more."""
    calls: list = []
    for name in ("_values", "_vjp"):
        real = getattr(scorecols, name)
        monkeypatch.setattr(scorecols, name,
                            lambda *a, real=real, **k: calls.append(1) or real(*a, **k))
    cfg = learned_binning()
    plan, theta, widths, cols = _setup(cfg)
    out = scorecols.score_columns(cols, plan, theta)
    assert len(calls) == 3
    assert sorted(k for k in out.events if k.startswith("score.")) == [
        "score.met", "score.met@event:MET.pt*0.95", "score.met@event:MET.pt*1.05"]
    _, vjps = scorecols.score_columns(cols, plan, theta, vjp=True)
    assert [e.key for e in vjps] == [
        "event:score.met", "event:score.met@event:MET.pt*1.05", "event:score.met@event:MET.pt*0.95"]
    cfg["systematics"][0]["field"] = "Jet.pt"
    plan, theta, widths, cols = _setup(cfg)
    calls.clear()
    out = scorecols.score_columns(cols, plan, theta)
    assert len(calls) == 1 and [k for k in out.events if "@" in k] == []
    calls.clear()
    value = _values(cols, plan, theta, widths, "numba")
    assert len(calls) == 1
    assert jax.tree_util.tree_leaves(value)
