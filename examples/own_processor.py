"""Your own coffea processor with exact gradients: move a soft jet pT cut (beside a
fixed soft |eta| cut) until the mean pT of the selected jets, in events with at least 2
of them (the YAML engine's meaning, by analysis.soft.pass_weights), reaches a target.
Run from the repository root:

    python examples/own_processor.py --executor futures --steps 5
"""

import argparse
import warnings

import coffea.util
import jax
import optax
from coffea import processor
from coffea.nanoevents import NanoAODSchema

from analysis import stats
from analysis.driver.runner import resolve_skhep
from analysis.soft import pass_weights, soft_cut


class MeanJetPt(processor.ProcessorABC):
    def __init__(self, theta):
        self.theta = theta  # {"pt_min": float}

    def process(self, events):
        pt = stats.from_awkward(events.Jet.pt)
        abs_eta = abs(stats.from_awkward(events.Jet.eta))

        def fn(theta):  # JAX code of the parameters: soft cuts, then mergeable moments
            p = soft_cut(pt, ">", theta["pt_min"], 5.0) * soft_cut(abs_eta, "<", 2.4, 0.1)
            jets, events_pass = pass_weights(p, 2)  # P(jet passes and >= 2 jets pass), P(>= 2 pass)
            return {"jet_pt": stats.moments(pt, weight=jets), "selected": events_pass.sum()}

        return {events.metadata["dataset"]: stats.derive(fn, self.theta)}

    def postprocess(self, accumulator):
        return accumulator


def main():
    p = argparse.ArgumentParser()
    p.add_argument(
        "--file",
        default="skhep:nanoAOD_2015_CMS_Open_Data_ttbar.root",
        help="a NanoAOD file, or skhep:NAME (a scikit-hep-testdata file, as in the configs)",
    )
    p.add_argument("--executor", choices=["iterative", "futures", "dask"], default="iterative")
    p.add_argument("--chunksize", type=int, default=100)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--target", type=float, default=60.0)
    p.add_argument(
        "--mode",
        choices=["auto", "forward", "reverse"],
        default="auto",
        help="stats.differentiable's mode: reverse is two passes per gradient, any number of parameters",
    )
    args = p.parse_args()
    if args.file.startswith("skhep:"):
        args.file = resolve_skhep(args.file[len("skhep:") :], "--file")
    warnings.filterwarnings("ignore", module="coffea")  # NanoAODSchema notes on these files
    coffea.util.coffea_console.quiet = True  # no progress bars
    if args.executor == "dask":
        from dask.distributed import Client

        executor = processor.DaskExecutor(client=Client(n_workers=2, threads_per_worker=1))
    elif args.executor == "futures":
        executor = processor.FuturesExecutor(workers=2, status=False)
    else:
        executor = processor.IterativeExecutor(status=False)
    runner = processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=args.chunksize)

    # One chunked pass per gradient (forward mode: jax.grad sees the merged Jacobian of
    # the states), or two in reverse mode (values, then the pullback of the loss).
    f = stats.differentiable(
        lambda th: runner({"ttbar": [args.file]}, MeanJetPt(th), treename="Events")["ttbar"],
        mode=args.mode,
    )

    def loss(theta):
        return (stats.mean(f(theta)["jet_pt"]) - args.target) ** 2

    theta, opt = {"pt_min": 20.0}, optax.adam(2.0)
    state = opt.init(theta)
    for step in range(args.steps):
        value, grad = jax.value_and_grad(loss)(theta)
        updates, state = opt.update(grad, state)
        theta = optax.apply_updates(theta, updates)
        print(f"step {step}: loss {float(value):.4g}, pt_min -> {float(theta['pt_min']):.3f} GeV")


if __name__ == "__main__":  # dask and futures workers re-import this file
    main()
