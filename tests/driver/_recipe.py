"""The documented executor recipes for an own processor, one per run (a script the tests
start in a subprocess under a timeout): ``python tests/driver/_recipe.py NAME FILE``
prints the mean jet pT and its derivative, or exits 3 with the error's one line.
``fork_pool`` and ``yaml_fork_pool`` catch nothing: what a user's script shows is what
the test sees (the own processor's ``stats.derive`` and the YAML engine's
``DiffProcessor`` on a kept pool made with ``fork`` after JAX started)."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import sys

from coffea import processor
from coffea.nanoevents import NanoAODSchema

from analysis import stats
from analysis.soft import pass_weights, soft_cut


class MeanJetPt(processor.ProcessorABC):
    def __init__(self, theta):
        self.theta = theta

    def process(self, events):
        pt = stats.from_awkward(events.Jet.pt)

        def fn(theta):
            jets, _ = pass_weights(soft_cut(pt, ">", theta["pt_min"], 5.0), 2)
            return {"jet_pt": stats.moments(pt, weight=jets)}

        return {events.metadata["dataset"]: stats.derive(fn, self.theta)}

    def postprocess(self, accumulator):
        return accumulator


def run(executor, path: str) -> None:
    runner = processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=100)
    out = runner({"ttbar": [path]}, MeanJetPt({"pt_min": 30.0}), treename="Events")
    value, grad = out["ttbar"].value_and_grad(lambda s: stats.mean(s["jet_pt"]))
    print("RESULT", repr(float(value)), repr(float(grad["pt_min"])))


def yaml_fork_pool(path: str) -> None:
    """The YAML engine's processor on coffea's Runner with a kept ``fork`` pool, after a
    pass here started JAX (the JAX backend: the pass runs JAX in this process)."""
    from analysis.config.loader import load_config
    from analysis.driver.runner import Evaluator
    from analysis.pipeline.job import Job
    from analysis.pipeline.request import Request

    with Evaluator(load_config("configs/ttbar.yaml"), backend="jax", cache=False) as ev:
        ev.run(order=0)  # JAX has started here
        theta, widths = ev.theta_and_widths(None, None)
        proc = ev._processor(Job(ev.plan, Request(theta, widths, order=0), ev.weight_branches,
                                 backend=ev.backend))
        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
            runner = processor.Runner(executor=processor.FuturesExecutor(pool=pool, status=False),
                                      schema=NanoAODSchema, chunksize=100000)
            runner({"ttbar": [path]}, proc, treename="Events")


def main(name: str, path: str) -> int:
    if name == "yaml_fork_pool":
        yaml_fork_pool(path)
        return 0
    run(processor.IterativeExecutor(status=False), path)  # JAX has started here
    if name == "fork_pool":  # nothing caught: the user's view
        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
            run(processor.FuturesExecutor(pool=pool, status=False), path)
        return 0
    try:
        if name == "iterative":
            run(processor.IterativeExecutor(status=False), path)
        elif name == "futures":
            run(processor.FuturesExecutor(workers=2, status=False), path)
        elif name == "spawn_pool":
            ctx = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
                for _ in range(2):  # a kept pool serves two passes
                    run(processor.FuturesExecutor(pool=pool, status=False, retries=0), path)
        elif name == "dask":
            from dask.distributed import Client

            with Client(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
                run(processor.DaskExecutor(client=client, status=False), path)
        else:
            raise SystemExit(f"no recipe {name}")
    except Exception as err:
        print(str(err).splitlines()[0][-400:], file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
