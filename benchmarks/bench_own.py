"""An own processor's gradient passes against a plain coffea pass (issue 34).

The own processor is the README's MeanJetPt with two soft cuts (pT > pt_min, width 5;
|eta| < 2.4, width 0.1), ">= 2 jets" by ``analysis.soft.pass_weights`` and jet-pT
moments (``stats.derive``, forward mode), under ``jax.value_and_grad`` through
``stats.differentiable``: one Runner pass per gradient. The plain pass applies the same
hard cuts with awkward and sums jet pT moments. Same process, iterative executor, on
generated ttbar events (analysis.data.generate). Per chunksize, two child processes:
one with an empty JAX compilation cache (cold), one with the cache the first left
(warm). In each: the plain pass (best of 2), the first gradient pass, two later passes
without the column cache (``column_budget = 0``) and two with it
(``analysis.data.owncache.CachedColumns``). Run from the repository root:

    python benchmarks/bench_own.py                     # 200k events, chunksizes 10k and 50k
    python benchmarks/bench_own.py --events 20000 --chunksizes 5000   # a quick look

Writes its figures to benchmarks/results/own.*.json (``benchmarks/results_table.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GOALS = {"first_cold": 10.0, "first_warm": 2.0, "later_no_cache": 1.0, "later_cache": 0.3}


def _processors():
    import awkward as ak
    from coffea import processor

    from analysis import stats
    from analysis.data.owncache import CachedColumns
    from analysis.soft import pass_weights, soft_cut

    class MeanJetPt(CachedColumns, processor.ProcessorABC):
        def __init__(self, theta, budget=None):
            self.theta = theta
            if budget is not None:
                self.column_budget = budget

        def columns(self, events):
            return {"pt": stats.from_awkward(events.Jet.pt),
                    "abs_eta": abs(stats.from_awkward(events.Jet.eta))}

        def process_columns(self, columns, metadata):
            pt, abs_eta = columns["pt"], columns["abs_eta"]

            def fn(theta):
                p = soft_cut(pt, ">", theta["pt_min"], 5.0) * soft_cut(abs_eta, "<", 2.4, 0.1)
                jets, selected = pass_weights(p, 2)
                return {"jet_pt": stats.moments(pt, weight=jets), "selected": selected.sum()}

            return {metadata["dataset"]: stats.derive(fn, self.theta)}

        def postprocess(self, accumulator):
            return accumulator

    class Plain(processor.ProcessorABC):
        def process(self, events):
            jets = events.Jet
            jets = jets[(jets.pt > 30.0) & (abs(jets.eta) < 2.4)]
            pt = ak.flatten(jets[ak.num(jets) >= 2].pt)
            return {"n": int(ak.count(pt)), "s1": float(ak.sum(pt)), "s2": float(ak.sum(pt**2))}

        def postprocess(self, accumulator):
            return accumulator

    return MeanJetPt, Plain


def child(files: list[str], chunksize: int) -> dict:
    import warnings

    import coffea.util
    import jax
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema

    from analysis import stats

    warnings.filterwarnings("ignore")
    coffea.util.coffea_console.quiet = True
    NanoAODSchema.warn_missing_crossrefs = False
    MeanJetPt, Plain = _processors()
    runner = processor.Runner(executor=processor.IterativeExecutor(status=False),
                              schema=NanoAODSchema, chunksize=chunksize)
    fileset = {"ttbar": files}

    def timed(call):
        t = time.perf_counter()
        out = call()
        return time.perf_counter() - t, out

    plain = min(timed(lambda: runner(fileset, Plain(), treename="Events"))[0] for _ in range(2))

    def gradient(theta, budget):
        f = stats.differentiable(
            lambda th: runner(fileset, MeanJetPt(th, budget), treename="Events")["ttbar"])
        return jax.value_and_grad(lambda th: (stats.mean(f(th)["jet_pt"]) - 60.0) ** 2)(theta)

    first, (value, grad) = timed(lambda: gradient({"pt_min": 30.0}, None))
    later_no = [timed(lambda i=i: gradient({"pt_min": 31.0 + i}, 0))[0] for i in range(2)]
    later_yes = [timed(lambda i=i: gradient({"pt_min": 33.0 + i}, None))[0] for i in range(2)]
    return {"plain": plain, "first": first, "later_no_cache": later_no,
            "later_cache": later_yes, "loss": float(value), "grad": float(grad["pt_min"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--chunksizes", type=int, nargs="+", default=[10_000, 50_000])
    p.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "diffcoffea_bench_own"))
    p.add_argument("--child", nargs=2, metavar=("CHUNKSIZE", "FILES_JSON"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child[1]), int(args.child[0]))))
        return
    from analysis.data.generate import ensure_dataset

    files = [str(f) for f in ensure_dataset(Path(args.data) / str(args.events), process="ttbar",
                                            n_events=args.events, n_files=1, seed=1)]
    results = {"events": args.events, "executor": "iterative", "goals": GOALS, "runs": []}
    for chunksize in args.chunksizes:
        with tempfile.TemporaryDirectory(prefix="jaxcache_") as cache:
            env = {**os.environ, "DIFFCOFFEA_JAX_CACHE": cache, "PYTHONPATH": str(REPO)}
            env.pop("JAX_COMPILATION_CACHE_DIR", None)
            for phase in ("cold", "warm"):
                cmd = [sys.executable, __file__, "--child", str(chunksize), json.dumps(files)]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                ratios = {
                    "first": r["first"] / r["plain"],
                    "later_no_cache": min(r["later_no_cache"]) / r["plain"],
                    "later_cache": min(r["later_cache"]) / r["plain"],
                }
                results["runs"].append({"chunksize": chunksize, "cache": phase, **r,
                                        "ratios": ratios})
                print(f"chunksize {chunksize:>6} {phase}: plain {r['plain']:.2f} s, first "
                      f"{r['first']:.2f} s ({ratios['first']:.1f}x), later without column "
                      f"cache {min(r['later_no_cache']):.2f} s ({ratios['later_no_cache']:.2f}x),"
                      f" with {min(r['later_cache']):.2f} s ({ratios['later_cache']:.2f}x)",
                      flush=True)
    from benchmarks.results_table import command_line, record

    for run in results["runs"]:
        size = f"{run['chunksize'] // 1000}k"
        figures = [(f"own.{size}.first_{run['cache']}",
                    f"own processor, first gradient pass ({run['cache']} compilation cache, "
                    f"chunks of {size}) / plain coffea pass",
                    run["ratios"]["first"], GOALS[f"first_{run['cache']}"])]
        if run["cache"] == "warm":
            figures += [
                (f"own.{size}.later", f"own processor, later pass (chunks of {size}) / plain",
                 run["ratios"]["later_no_cache"], GOALS["later_no_cache"]),
                (f"own.{size}.later_cached", f"own processor, later pass with CachedColumns "
                 f"(chunks of {size}) / plain", run["ratios"]["later_cache"],
                 GOALS["later_cache"]),
            ]
        for name, compares, figure, goal in figures:
            record(name, compares=compares, figure=figure, goal=f"<= {goal}x",
                   met=figure <= goal, command=command_line(__file__, None),
                   details={k: run[k] for k in ("chunksize", "cache", "plain", "first")})


if __name__ == "__main__":
    main()
