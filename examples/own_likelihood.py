"""Your own coffea processor with a binned likelihood: soft histograms of HT for a ttbar
signal and a Drell-Yan background, a jet-energy-scale shift and an lnN normalisation,
and gradient steps on the jet pT cut and the HT cut that raise the expected discovery
significance (profiled, with MC statistics). Run from the repository root:

    python examples/own_likelihood.py --executor futures --steps 5
"""

import argparse
import warnings

import awkward as ak
import coffea.util
import jax
import numpy as np
import optax
from coffea import processor
from coffea.nanoevents import NanoAODSchema

from analysis import likelihood as lk
from analysis import stats
from analysis.driver.runner import resolve_skhep
from analysis.soft import pass_weights, soft_cut

EDGES = [0.0, 150.0, 250.0, 350.0, 500.0, 800.0]
WEIGHTS = {"ttbar": 0.1, "dy": 2.0}  # per-event weights (luminosity x cross section / events)
# The jet-energy-scale shifts: a shift moves selection and observable together.
SCALES = {"ht": 1.0, "ht_jes_up": 1.03, "ht_jes_down": 0.97}


class HtTemplates(processor.ProcessorABC):
    def __init__(self, theta):
        self.theta = theta  # {"jet_pt_min": GeV, "ht_min": GeV}

    def process(self, events):
        dataset = events.metadata["dataset"]
        return {dataset: stats.derive(self.chunk_function(events), self.theta)}

    def chunk_function(self, events):
        """fn(theta) of one chunk. It closes over the chunk's arrays only (numpy arrays and
        stats.Jagged, prepared here), not over awkward arrays nor the processor, so that
        stats.derive compiles it once per bucket of chunk shapes instead of tracing it on
        every chunk."""
        jets = events.Jet[abs(events.Jet.eta) < 2.4]
        w = np.full(len(events), WEIGHTS[events.metadata["dataset"]])
        shifted = [  # (name, the shifted jets' pT, their HT per event)
            (name, stats.from_awkward(jets.pt * scale),
             ak.to_numpy(ak.sum(jets.pt * scale, axis=1)).astype(np.float64))
            for name, scale in SCALES.items()
        ]
        edges = list(EDGES)

        def fn(theta):
            out = {}
            for name, pt, ht in shifted:
                # P(at least 2 jets pass the soft pT cut), then the soft HT cut
                _, p = pass_weights(soft_cut(pt, ">", theta["jet_pt_min"], 5.0), 2)
                p = p * soft_cut(ht, ">", theta["ht_min"], 20.0)
                # weight: the event weight; prob: the soft pass probability (sumw2 exact)
                out[name] = stats.histogram(ht, edges, weight=w, prob=p)
            return out

        return fn

    def postprocess(self, accumulator):
        return accumulator


MODEL = lk.Model(
    channels=[lk.Channel("sr", "ht", variations={"jes": ("ht_jes_up", "ht_jes_down")})],
    signal=["ttbar"],
    normalisations=[lk.Normalisation("dy_norm", ["dy"], kappa=1.10)],
    mc_stat=True,
)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--signal", default="skhep:nanoAOD_2015_CMS_Open_Data_ttbar.root")
    p.add_argument("--background", default="skhep:nano_dy.root")
    p.add_argument("--executor", choices=["iterative", "futures", "dask"], default="iterative")
    p.add_argument("--chunksize", type=int, default=100)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    files = {}
    for name, f in (("ttbar", args.signal), ("dy", args.background)):
        files[name] = [resolve_skhep(f[len("skhep:") :], name) if f.startswith("skhep:") else f]
    warnings.filterwarnings("ignore", module="coffea")
    coffea.util.coffea_console.quiet = True
    if args.executor == "dask":
        from dask.distributed import Client

        executor = processor.DaskExecutor(client=Client(n_workers=2, threads_per_worker=1))
    elif args.executor == "futures":
        executor = processor.FuturesExecutor(workers=2, status=False)
    else:
        executor = processor.IterativeExecutor(status=False)
    runner = processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=args.chunksize)

    # One chunked pass per gradient; stats.join makes one Derived of {dataset: Derived}.
    f = stats.differentiable(
        lambda th: stats.join(runner(files, HtTemplates(th), treename="Events"))
    )

    def loss(theta):
        result = lk.significance(f(theta), MODEL)
        return -result.z, result.fit

    theta, opt = {"jet_pt_min": 30.0, "ht_min": 150.0}, optax.adam(5.0)
    state = opt.init(theta)
    for step in range(args.steps):
        (value, fit), grad = jax.value_and_grad(loss, has_aux=True)(theta)
        lk.raise_for_fit(fit, step=f"step {step}")  # one line if the profile fit failed
        updates, state = opt.update(grad, state)
        theta = optax.apply_updates(theta, updates)
        print(
            f"step {step}: Z = {-float(value):.4f}, jet_pt_min -> {float(theta['jet_pt_min']):.2f}, "
            f"ht_min -> {float(theta['ht_min']):.1f} GeV"
        )


if __name__ == "__main__":  # dask and futures workers re-import this file
    main()
