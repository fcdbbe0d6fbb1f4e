"""The README's own processor (two soft cuts, ``pass_weights(p, 2)``, jet-pT moments)
through coffea's Runner gives the YAML engine's numbers for the same selection.

Reference: the YAML engine's numba kernel (:mod:`analysis.pipeline.backends.numba.fastkernel`)
on configs/ttbar.yaml's selection without the event weight (the README's processor has
none), the whole real CMS 2015 ttbar file as one chunk. The README's class, taken from
the README's own Python block, runs in chunks of 50 events on the iterative, futures and
dask executors; its merged jet-pT moments, the sum of the events' pass probabilities,
and their Jacobians in both cut values equal the engine's to 1e-12 (Jacobians 1e-11).
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from coffea import processor
from coffea.nanoevents import NanoAODSchema

from tests.chunked_helpers import NANOAOD_WARNINGS, read_columns

ROOT = Path(__file__).resolve().parents[2]
TTBAR = "nanoAOD_2015_CMS_Open_Data_ttbar.root"
THETA = {"pt_min": 38.0, "eta_max": 2.1}
pytestmark = [*NANOAOD_WARNINGS, pytest.mark.slow]


def readme_processor() -> type:
    """The ``MeanJetPt`` class exactly as the README's Python block defines it."""
    block = re.search(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(),
                      flags=re.S | re.M).group(1)
    source = block[: block.index("\nrunner = ")]
    assert "pass_weights(p, 2)" in source and "class MeanJetPt" in source
    # a module name nobody can import: cloudpickle sends the class to the workers by value
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(source, "README.md", "exec"), namespace)  # noqa: S102
    return namespace["MeanJetPt"]


def engine(path: Path) -> tuple[dict, dict]:
    """``({name: value}, {name: (d/d pt_min, d/d eta_max)})`` of the YAML engine."""
    from analysis.config.loader import config_from_dict
    from analysis.pipeline.backends.numba import fastkernel
    from analysis.pipeline.plan import build_plan, initial_widths

    cfg = yaml.safe_load((ROOT / "configs" / "ttbar.yaml").read_text())
    cfg["datasets"] = {"sig": {"files": ["unused.root"]}}
    cfg["parameters"]["jet_pt_min"]["init"] = THETA["pt_min"]
    cfg["parameters"]["jet_abs_eta_max"]["init"] = THETA["eta_max"]
    config = config_from_dict(cfg)
    plan = build_plan(config)
    assert [plan.param_names[i] for i in plan.trainable] == ["jet_pt_min", "jet_abs_eta_max"]
    theta = np.array([config.initial_params()[n] for n in plan.param_names])
    value, jac = fastkernel.evaluate_columns(read_columns(path, plan, weight_branch=None), plan,
                                             theta, np.array(initial_widths(config)), order=1)
    return flat(value["selected_sumw"], value["observables"]["jet_pt"]["moments"]), \
        flat(jac["selected_sumw"], jac["observables"]["jet_pt"]["moments"])


def flat(events, moments) -> dict:  # noqa: ANN001
    """``{name: array}``; a state's centre and offset as their sum (the mean)."""
    f = {k: np.asarray(v) for k, v in moments._asdict().items()}
    f["mean"] = f.pop("center") + f.pop("dmean")
    return {"events": np.asarray(events), **f}


def run(executor, path: Path, cls: type):  # noqa: ANN001, ANN201
    import coffea.util

    coffea.util.coffea_console.quiet = True
    NanoAODSchema.warn_missing_crossrefs = False
    runner = processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return runner({"ttbar": [str(path)]}, cls(dict(THETA)), treename="Events")["ttbar"]


def assert_same(d, ref_value: dict, ref_jac: dict) -> None:  # noqa: ANN001
    assert d.names == ("eta_max", "pt_min")
    value = flat(d.value["events"], d.value["jet_pt"])
    jac = flat(d.jac["events"], d.jac["jet_pt"])
    assert value.keys() == ref_value.keys()
    for k in ref_value:
        assert abs(value[k] - ref_value[k]) <= 1e-12 * abs(ref_value[k]), (k, value[k], ref_value[k])
        got = jac[k][[1, 0]]  # (pt_min, eta_max), the engine's order
        scale = max(np.max(np.abs(ref_jac[k])), 1e-300)
        assert np.max(np.abs(got - ref_jac[k])) <= 1e-11 * scale, (k, got, ref_jac[k])
    assert ref_value["sumw"] > 0 and np.all(np.abs(ref_jac["mean"]) > 0)


def test_readme_processor_equals_the_yaml_engine_on_every_executor(shared_data) -> None:
    path = shared_data / TTBAR
    cls = readme_processor()
    ref_value, ref_jac = engine(path)
    assert_same(run(processor.IterativeExecutor(status=False), path, cls), ref_value, ref_jac)
    assert_same(run(processor.FuturesExecutor(workers=2, status=False), path, cls),
                ref_value, ref_jac)

    from dask.distributed import Client, LocalCluster

    assert os.environ.get("JAX_ENABLE_X64") == "1"  # the workers inherit it
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        out = run(processor.DaskExecutor(client=client, status=False), path, cls)
    assert_same(out, ref_value, ref_jac)
