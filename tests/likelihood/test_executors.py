"""Soft histograms and Z through coffea's Runner on real NanoAOD: the same (1e-10, gradients
included) for any chunking and for the iterative and futures executors; and
examples/own_likelihood.py's processor gives states the likelihood accepts."""

from __future__ import annotations

import warnings

import awkward as ak
import jax
import numpy as np
import pytest
from coffea import processor
from coffea.nanoevents import NanoAODSchema

from analysis import likelihood as lk
from analysis import stats
from analysis.soft import count_at_least, soft_cut

EDGES = [0.0, 150.0, 250.0, 350.0, 500.0, 800.0]
THETA = {"jet_pt_min": 30.0, "ht_min": 150.0}
MODEL = lk.Model(
    [lk.Channel("sr", "ht", {"jes": ("ht_jes_up", "ht_jes_down")})],
    ["ttbar"],
    [lk.Normalisation("dy_norm", ["dy"], 1.1)],
)


class HtTemplates(processor.ProcessorABC):
    """Soft HT templates with a jet-energy-scale shift (as examples/own_likelihood.py)."""

    def __init__(self, theta):
        self.theta = theta

    def process(self, events):
        dataset = events.metadata["dataset"]
        jets = events.Jet[abs(events.Jet.eta) < 2.4]
        w = np.full(len(events), 0.1 if dataset == "ttbar" else 2.0)

        def fn(theta):
            def hist(scale):
                pt = stats.from_awkward(jets.pt * scale)
                ht = ak.to_numpy(ak.sum(jets.pt * scale, axis=1)).astype(np.float64)
                p = count_at_least(soft_cut(pt, ">", theta["jet_pt_min"], 5.0), 2)
                p = p * soft_cut(ht, ">", theta["ht_min"], 20.0)
                return stats.histogram(ht, EDGES, weight=w, prob=p)

            return {"ht": hist(1.0), "ht_jes_up": hist(1.03), "ht_jes_down": hist(0.97)}

        return {dataset: stats.derive(fn, self.theta)}

    def postprocess(self, accumulator):
        return accumulator


def _run(executor, fileset, chunksize):
    import coffea.util

    coffea.util.coffea_console.quiet = True
    runner = processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=chunksize)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return stats.join(runner(fileset, HtTemplates(THETA), treename="Events"))


@pytest.fixture(scope="module")
def fileset(shared_data):
    return {
        "ttbar": [str(shared_data / "nanoAOD_2015_CMS_Open_Data_ttbar.root")],
        "dy": [str(shared_data / "nano_dy.root")],
    }


def _z(d):
    return d.value_and_grad(lambda s: lk.discovery_significance(s, MODEL))


@pytest.mark.slow
def test_chunking_and_executors_give_the_same_histograms_and_z(fileset):
    whole = _run(processor.IterativeExecutor(status=False), fileset, 1000)
    z0, g0 = _z(whole)
    assert z0 > 0.5 and all(np.isfinite(v) for v in g0.values())
    lk.check_templates(lk.templates(whole.value, MODEL), MODEL, lk.edges(whole.value, MODEL))
    others = [
        _run(processor.IterativeExecutor(status=False), fileset, 37),
        _run(processor.FuturesExecutor(workers=2, status=False), fileset, 50),
    ]
    for d in others:
        for part in ("value", "jac"):  # every histogram bin and its derivatives
            pairs = zip(
                jax.tree_util.tree_leaves(getattr(whole, part)),
                jax.tree_util.tree_leaves(getattr(d, part)),
                strict=True,
            )
            for want, got in pairs:
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
        z, g = _z(d)
        assert abs(z - z0) <= 1e-10 * z0
        for n in g0:
            assert abs(g[n] - g0[n]) <= 1e-10 * max(abs(g0[n]), 1e-8), (n, g[n], g0[n])


def test_the_example_processor_is_compiled_and_equals_the_closure_over_awkward(fileset):
    """examples/own_likelihood.py's chunk function closes over arrays only: a Runner
    pass (5 chunks) compiles a few programs, a second pass none; its states equal those of
    HtTemplates above (a closure over the awkward jets, count_at_least: traced on every
    chunk; run in whole files, 2 chunks) to 1e-12, values and Jacobians."""
    import coffea.util

    from analysis.stats import _compiled
    from analysis.stats._closure import closure_inputs
    from examples.own_likelihood import HtTemplates as Example
    from tests.chunked_helpers import read_events

    events = read_events(fileset["dy"][0])
    events.metadata["dataset"] = "dy"
    assert closure_inputs(Example(THETA).chunk_function(events)) is not None
    coffea.util.coffea_console.quiet = True
    runner = processor.Runner(executor=processor.IterativeExecutor(status=False),
                              schema=NanoAODSchema, chunksize=50)

    def programs() -> int:
        return _compiled.BUILT["programs"]

    _compiled._PROGRAMS.clear()
    before = programs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = stats.join(runner(fileset, Example(THETA), treename="Events"))
        first = programs() - before
        stats.join(runner(fileset, Example(THETA), treename="Events"))
        # the reference in whole files (200 + 40 events): 2 traces and compiles, not 5
        # (a chunk's sums are additive: merged over 5 chunks they differ by rounding)
        whole = processor.Runner(executor=processor.IterativeExecutor(status=False),
                                 schema=NanoAODSchema, chunksize=200)
        want = stats.join(whole(fileset, HtTemplates(THETA), treename="Events"))
    assert 1 <= first <= 5 and programs() - before == first, first
    for part in ("value", "jac"):
        pairs = zip(jax.tree_util.tree_leaves(getattr(want, part)),
                    jax.tree_util.tree_leaves(getattr(got, part)), strict=True)
        for a, b in pairs:
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12 * np.abs(a).max())
