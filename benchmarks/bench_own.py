"""An own processor's gradient passes against a plain coffea pass (issue 34).

The own processor is the README's MeanJetPt with two soft cuts (pT > pt_min, width 5;
|eta| < 2.4, width 0.1), ">= 2 jets" by ``analysis.soft.pass_weights`` and jet-pT
moments (``stats.derive``, forward mode), under ``jax.value_and_grad`` through
``stats.differentiable``: one Runner pass per gradient. The plain pass applies the same
hard cuts with awkward and sums jet pT moments. Same process, iterative executor, on
generated ttbar events (analysis.data.generate). Per chunksize, two child processes
that share a JAX persistent compilation cache directory which this script creates
(a temporary directory, given to JAX as ``JAX_COMPILATION_CACHE_DIR`` with the cache
thresholds at 0): the first starts with it empty (cold), the second loads what the
first wrote (warm). In each: the plain pass (best of 2), the Runner alone (a processor
that returns a constant: the floor of any pass, best of 2), the Runner reading the
processor's columns and computing nothing (the floor of a pass that reads them, best
of 2), the first gradient pass, two
later passes without the column cache (``column_budget = 0``), two with it
(``analysis.data.owncache.CachedColumns``) and two with it through
``analysis.data.owncache.CachedRunner`` (the kept chunks without coffea's Runner). The warm child then runs the same on
coffea's futures executor with a pool of 2 worker processes kept across passes
(the workers inherit the compilation cache): its first pass, later passes without
and with the column cache; then on coffea's dask executor with a
``dask.distributed.LocalCluster`` of 2 worker processes (one thread each) kept across
passes, the same three and two with the column cache through ``CachedRunner`` wrapping
the dask Runner that keeps columns (the chunks' outputs computed in the workers that
keep them, without coffea's Runner). The cluster starts before the dask passes and is not timed in
them (its start-up, the workers connected, one ``client.run`` that checks they
inherited ``JAX_ENABLE_X64`` and the compilation cache directory, their imports of JAX,
coffea and this package, and ``dask.dataframe``, which coffea's DaskExecutor imports in
the driver at its first call, is recorded apart; the futures pool's workers likewise
start and import before its passes); the workers load the compiled programs at their
first chunk, inside the first pass, and the kept columns live in
the workers while the cluster lives: every dask pass pins each chunk to one worker
(``DaskExecutor(..., worker_affinity=True)``), so that it lands where its columns were
kept (the script prints for how many chunks the worker that got them had kept them)
and the chunks spread over both workers. The loss and gradient of every futures and dask
pass must equal the iterative pass's at the same parameter to 1e-10 relative (the
script fails otherwise). A third child is a new user's first pass: empty numba and JAX
caches (``NUMBA_CACHE_DIR`` and ``JAX_COMPILATION_CACHE_DIR``, temporary directories), the
plain pass then the first gradient pass, whose wall time (seconds: it compiles every numba
kernel the pass calls) is recorded against :data:`COLD_NUMBA_S`; ``--phases`` runs some of
the three children only. Every figure carries the 1-minute load average. Run from
the repository root:

    python benchmarks/bench_own.py                     # 200k events, chunksizes 10k and 50k
    python benchmarks/bench_own.py --events 20000 --chunksizes 5000   # a quick look
    python benchmarks/bench_own.py --events 40000 --chunksizes 10000 --phases cold_numba

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

# the parallel executors of the warm child: result prefix -> what the records call it
PARALLEL = {"futures_": "futures (2 workers, pool kept)",
            "dask_": "dask (LocalCluster of 2 workers, kept)"}

GOALS = {"first_cold": 10.0, "first_warm": 2.0, "later_no_cache": 1.0, "later_cache": 0.3}
#: A new user's first pass (empty numba and JAX caches), seconds: c818c76 took ~19 s at
#: 40k events in 10k chunks, the one-set walk's unrolled copies then ~58 s (issue 49).
COLD_NUMBA_S = 25.0


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

    class Null(processor.ProcessorABC):
        """The Runner's own cost: a processor that reads nothing and returns a constant
        (the floor of any pass through coffea's Runner, column cache or not)."""

        def process(self, events):
            return {"n": 1}

        def postprocess(self, accumulator):
            return accumulator

    class Read(processor.ProcessorABC):
        """What a later pass without the column cache cannot go below: the Runner and
        MeanJetPt's columns read and wrapped (``columns``), nothing computed."""

        def process(self, events):
            MeanJetPt({"pt_min": 30.0}).columns(events)
            return {"n": 1}

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

    return MeanJetPt, Plain, Null, Read


def _same_passes(result: dict, prefix: str) -> None:
    """Fail unless every pass of ``prefix``'s executor gave the iterative pass's loss
    and gradient at the same parameter to 1e-10 relative (x64 in its workers, nothing
    lost on the way)."""
    import math

    reference = {theta: (loss, grad) for theta, loss, grad in result["passes"]}
    for theta, loss, grad in result[f"{prefix}passes"]:
        ref_loss, ref_grad = reference[theta]
        if not (math.isclose(loss, ref_loss, rel_tol=1e-10)
                and math.isclose(grad, ref_grad, rel_tol=1e-10)):
            raise AssertionError(
                f"{prefix.rstrip('_')} at pt_min {theta}: loss {loss!r}, gradient {grad!r}; "
                f"iterative: loss {ref_loss!r}, gradient {ref_grad!r}")


def child(files: list[str], chunksize: int, parallel: bool) -> dict:
    import multiprocessing
    import warnings
    from concurrent.futures import ProcessPoolExecutor

    import coffea.util
    import jax
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema

    from analysis import stats
    from analysis.data.owncache import CachedRunner

    warnings.filterwarnings("ignore")
    coffea.util.coffea_console.quiet = True
    NanoAODSchema.warn_missing_crossrefs = False
    MeanJetPt, Plain, Null, Read = _processors()
    fileset = {"ttbar": files}

    def timed(call):
        load = os.getloadavg()[0]
        t = time.perf_counter()
        out = call()
        return time.perf_counter() - t, out, max(load, os.getloadavg()[0])

    def measure(executor, prefix: str, before_cached_runner=None) -> dict:
        """The passes on ``executor``. The passes through ``CachedRunner`` run on the
        iterative executor and, where ``before_cached_runner`` is given (dask), on the
        dask Runner, after ``out.update(before_cached_runner())``."""
        runner = processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=chunksize)
        cached_runner = CachedRunner(runner)

        # (pt_min, loss, gradient) of every pass: the executors are compared on them
        passes: list[tuple[float, float, float]] = []

        def gradient(theta, budget, run=None):
            run = run or runner
            f = stats.differentiable(
                lambda th: run(fileset, MeanJetPt(th, budget), treename="Events")["ttbar"])
            value, grad = jax.value_and_grad(
                lambda th: (stats.mean(f(th)["jet_pt"]) - 60.0) ** 2)(theta)
            passes.append((theta["pt_min"], float(value), float(grad["pt_min"])))
            return value, grad

        first, (value, grad), load = timed(lambda: gradient({"pt_min": 30.0}, None))
        out = {f"{prefix}first": first, f"{prefix}loss": float(value),
               f"{prefix}grad": float(grad["pt_min"]), f"{prefix}load": [load],
               f"{prefix}passes": passes}
        for name, budget, start in (("later_no_cache", 0, 31.0), ("later_cache", None, 33.0)):
            runs = [timed(lambda i=i, s=start, b=budget: gradient({"pt_min": s + i}, b))
                    for i in range(2)]
            out[f"{prefix}{name}"] = [r[0] for r in runs]
            out[f"{prefix}load"] += [r[2] for r in runs]
        if not prefix or before_cached_runner is not None:
            if before_cached_runner is not None:
                out.update(before_cached_runner())
            runs = [timed(lambda i=i: gradient({"pt_min": 35.0 + i}, None, cached_runner))
                    for i in range(2)]
            assert cached_runner.last == "cached", cached_runner.why
            out[f"{prefix}later_cached_runner"] = [r[0] for r in runs]
            out[f"{prefix}cached_runner_why"] = cached_runner.why
            out[f"{prefix}load"] += [r[2] for r in runs]
        return out

    def runner_alone(executor) -> float:
        """The Runner on ``executor`` with a processor that returns a constant (best of
        2): the floor of any pass there. Run after that executor's passes."""
        run = processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=chunksize)
        return min(timed(lambda: run(fileset, Null(), treename="Events"))[0] for _ in range(2))

    plain_runner = processor.Runner(executor=processor.IterativeExecutor(status=False),
                                    schema=NanoAODSchema, chunksize=chunksize)
    plains = [timed(lambda: plain_runner(fileset, Plain(), treename="Events")) for _ in range(2)]
    result = {"plain": min(p[0] for p in plains), "plain_load": [p[2] for p in plains]}
    result["runner_floor"] = min(
        timed(lambda: plain_runner(fileset, Null(), treename="Events"))[0] for _ in range(2))
    result["read_floor"] = min(
        timed(lambda: plain_runner(fileset, Read(), treename="Events"))[0] for _ in range(2))
    result.update(measure(processor.IterativeExecutor(status=False), ""))
    if parallel:
        # spawned workers: a fork of this process (JAX's threads running) can deadlock
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
            start = time.perf_counter()
            # both workers started and their imports done: set-up, as a kept pool has
            assert sorted(pool.map(_preload, range(2))) == [0, 1]
            result["futures_startup"] = time.perf_counter() - start
            result.update(measure(processor.FuturesExecutor(pool=pool, status=False),
                                  "futures_"))
            result["futures_runner_floor"] = runner_alone(
                processor.FuturesExecutor(pool=pool, status=False))
        _same_passes(result, "futures_")
        result.update(_dask(measure, runner_alone))
        _same_passes(result, "dask_")
    return result


def child_cold_numba(files: list[str], chunksize: int) -> dict:
    """A new user's first pass: this process starts with an empty numba cache
    (``NUMBA_CACHE_DIR``, given by the parent) and an empty JAX cache, so its first
    gradient pass compiles every numba kernel it calls; the plain pass (best of 2)
    before it, for scale. The imports are outside the pass (as in :func:`child`)."""
    import warnings

    import coffea.util
    import jax
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema

    from analysis import stats

    warnings.filterwarnings("ignore")
    coffea.util.coffea_console.quiet = True
    NanoAODSchema.warn_missing_crossrefs = False
    MeanJetPt, Plain, _, _ = _processors()
    fileset = {"ttbar": files}
    runner = processor.Runner(executor=processor.IterativeExecutor(status=False),
                              schema=NanoAODSchema, chunksize=chunksize)
    plains, loads = [], []
    for _ in range(2):
        t = time.perf_counter()
        runner(fileset, Plain(), treename="Events")
        plains.append(time.perf_counter() - t)
    f = stats.differentiable(
        lambda th: runner(fileset, MeanJetPt(th), treename="Events")["ttbar"])
    loads.append(os.getloadavg()[0])
    cpu, t = time.process_time(), time.perf_counter()
    value, grad = jax.value_and_grad(
        lambda th: (stats.mean(f(th)["jet_pt"]) - 60.0) ** 2)({"pt_min": 30.0})
    first, first_cpu = time.perf_counter() - t, time.process_time() - cpu
    loads.append(os.getloadavg()[0])
    return {"first": first, "first_cpu": first_cpu, "plain": min(plains),
            "loss": float(value), "grad": float(grad["pt_min"]), "load": loads}


def _preload(index: int = 0) -> int:
    """A worker's imports (JAX, coffea, this package; what its first chunk would import),
    done before the passes, as a pool or cluster kept across passes has them. The pause
    makes the pool start its second worker for the second call."""
    import coffea.nanoevents  # noqa: F401
    import coffea.processor  # noqa: F401

    import analysis.data.owncache  # noqa: F401
    import analysis.soft  # noqa: F401
    import analysis.stats  # noqa: F401

    time.sleep(0.3)
    return index


def _dask(measure, runner_alone) -> dict:
    """``measure`` on coffea's dask executor, a LocalCluster of 2 worker processes kept
    across the passes; its start-up (until one ``client.run`` on both workers came back)
    timed apart, outside every pass; then ``runner_alone`` there."""
    from coffea import processor
    from dask.distributed import Client, LocalCluster

    from analysis.data import owncache

    start = time.perf_counter()
    # worker processes (spawned by their nannies) inherit this process's environment:
    # JAX_ENABLE_X64 and the run's JAX_COMPILATION_CACHE_DIR
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        names = ("JAX_ENABLE_X64", "JAX_COMPILATION_CACHE_DIR")
        seen = client.run(lambda: [os.environ.get(n) for n in names])
        client.run(_preload)  # the workers' imports: set-up, as a kept cluster has
        # coffea's DaskExecutor imports dask.dataframe in this process at its first call
        # (0.9 s here): set-up too, once per session
        import dask.dataframe  # noqa: F401
        startup = time.perf_counter() - start
        expected = [os.environ.get(n) for n in names]
        assert len(seen) == 2 and all(v == expected for v in seen.values()), (seen, expected)
        def hits() -> dict:
            # the workers' kept-column hits and misses over the 5 passes through the
            # Runner (every chunk once per pass), before the CachedRunner's
            info = client.run(owncache.cache_info).values()
            return {"dask_column_hits": sum(i["hits"] for i in info),
                    "dask_column_lookups": sum(i["hits"] + i["misses"] for i in info)}

        # every pass pins each chunk to one worker (coffea's worker_affinity: by a hash
        # of its file and entry range), so that a later pass finds its kept columns
        # there; without it dask's scheduler put all 4 chunks of a 50k pass on one
        # worker (every task depends on the processor, sent to one worker): later
        # passes without the column cache took 0.21-0.25 s against 0.14 s with it at
        # 50k, 0.35 s against 0.29 s at 10k
        pinned = processor.DaskExecutor(client=client, status=False, worker_affinity=True)
        out = measure(pinned, "dask_", hits)
        out["dask_runner_floor"] = runner_alone(pinned)
    out["dask_startup"] = startup
    return out


#: The children run per chunksize (``--phases``).
PHASES = ("cold", "warm", "cold_numba")


def _cold_numba(chunksize: int, files: list[str], env: dict) -> dict:
    """:func:`child_cold_numba` in a new process whose numba and JAX caches are empty
    temporary directories (``env``'s JAX cache replaced: the cold and warm children
    share theirs)."""
    with tempfile.TemporaryDirectory(prefix="numbacache_") as numba_cache, \
            tempfile.TemporaryDirectory(prefix="jaxcache_") as jax_cache:
        cmd = [sys.executable, __file__, "--child", str(chunksize), json.dumps(files), "numba"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                             env={**env, "NUMBA_CACHE_DIR": numba_cache,
                                  "JAX_COMPILATION_CACHE_DIR": jax_cache})
    r = {"chunksize": chunksize, **json.loads(out.stdout.strip().splitlines()[-1])}
    print(f"chunksize {chunksize:>6} cold numba (a new user's first pass, empty numba and JAX "
          f"caches): first {r['first']:.2f} s ({r['first_cpu']:.2f} s CPU), plain "
          f"{r['plain']:.2f} s; load <= {max(r['load']):.1f}", flush=True)
    return r


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--chunksizes", type=int, nargs="+", default=[10_000, 50_000])
    p.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "diffcoffea_bench_own"))
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES),
                   help="which children to run per chunksize (default: all): a cold and a "
                        "warm JAX cache, and a new user's first pass (cold_numba: empty "
                        "numba and JAX caches)")
    p.add_argument("--child", nargs=3, metavar=("CHUNKSIZE", "FILES_JSON", "PARALLEL"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        files, chunksize = json.loads(args.child[1]), int(args.child[0])
        out = (child_cold_numba(files, chunksize) if args.child[2] == "numba"
               else child(files, chunksize, args.child[2] == "1"))
        print(json.dumps(out))
        return
    from analysis.data.generate import ensure_dataset

    files = [str(f) for f in ensure_dataset(Path(args.data) / str(args.events), process="ttbar",
                                            n_events=args.events, n_files=1, seed=1)]
    results = {"events": args.events, "executor": "iterative", "goals": GOALS, "runs": [],
               "cold_numba": []}
    for chunksize in args.chunksizes:
        with tempfile.TemporaryDirectory(prefix="jaxcache_") as cache:
            # JAX's own persistent cache in a directory of this run (the package leaves
            # a JAX_COMPILATION_CACHE_DIR given by the user alone)
            env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache,
                   "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                   "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
                   "JAX_ENABLE_X64": "1", "PYTHONPATH": os.pathsep.join(
                       filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
            env.pop("DIFFCOFFEA_JAX_CACHE", None)
            if "cold_numba" in args.phases:
                results["cold_numba"].append(_cold_numba(chunksize, files, env))
            for phase in ("cold", "warm"):
                if phase not in args.phases:
                    continue
                cmd = [sys.executable, __file__, "--child", str(chunksize), json.dumps(files),
                       "1" if phase == "warm" else "0"]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                ratios = {
                    "first": r["first"] / r["plain"],
                    "later_no_cache": min(r["later_no_cache"]) / r["plain"],
                    "later_cache": min(r["later_cache"]) / r["plain"],
                    "later_cached_runner": min(r["later_cached_runner"]) / r["plain"],
                }
                for prefix in PARALLEL:
                    if f"{prefix}first" in r:
                        ratios[f"{prefix}first"] = r[f"{prefix}first"] / r["plain"]
                        for name in ("later_no_cache", "later_cache", "later_cached_runner"):
                            if prefix + name in r:
                                ratios[prefix + name] = min(r[prefix + name]) / r["plain"]
                results["runs"].append({"chunksize": chunksize, "cache": phase, **r,
                                        "ratios": ratios})
                load = max(r["plain_load"] + r["load"])
                print(f"chunksize {chunksize:>6} {phase}: plain {r['plain']:.2f} s, first "
                      f"{r['first']:.2f} s ({ratios['first']:.1f}x), later without column "
                      f"cache {min(r['later_no_cache']):.2f} s ({ratios['later_no_cache']:.2f}x),"
                      f" with {min(r['later_cache']):.2f} s ({ratios['later_cache']:.2f}x); "
                      f"with CachedRunner {min(r['later_cached_runner']):.2f} s "
                      f"({ratios['later_cached_runner']:.2f}x); the Runner alone "
                      f"{r['runner_floor']:.2f} s ({r['runner_floor'] / r['plain']:.2f}x), "
                      f"reading the columns {r['read_floor']:.2f} s "
                      f"({r['read_floor'] / r['plain']:.2f}x); load <= {load:.1f}",
                      flush=True)
                if "futures_first" in r:
                    print(f"  futures, 2 workers (started and imports done in "
                          f"{r['futures_startup']:.2f} s, not in the passes): first "
                          f"{r['futures_first']:.2f} s "
                          f"({ratios['futures_first']:.1f}x), later without column cache "
                          f"{min(r['futures_later_no_cache']):.2f} s "
                          f"({ratios['futures_later_no_cache']:.2f}x), with "
                          f"{min(r['futures_later_cache']):.2f} s "
                          f"({ratios['futures_later_cache']:.2f}x); the Runner alone "
                          f"{r['futures_runner_floor']:.2f} s "
                          f"({r['futures_runner_floor'] / r['plain']:.2f}x); load <= "
                          f"{max(r['futures_load']):.1f}", flush=True)
                if "dask_first" in r:
                    print(f"  dask, LocalCluster of 2 workers (started in "
                          f"{r['dask_startup']:.2f} s, not in the passes): first "
                          f"{r['dask_first']:.2f} s ({ratios['dask_first']:.1f}x), later "
                          f"without column cache {min(r['dask_later_no_cache']):.2f} s "
                          f"({ratios['dask_later_no_cache']:.2f}x), with "
                          f"{min(r['dask_later_cache']):.2f} s "
                          f"({ratios['dask_later_cache']:.2f}x; kept columns found for "
                          f"{r['dask_column_hits']} of {r['dask_column_lookups'] * 2 // 5} "
                          f"chunks); with CachedRunner "
                          f"{min(r['dask_later_cached_runner']):.2f} s "
                          f"({ratios['dask_later_cached_runner']:.2f}x: "
                          f"{r['dask_cached_runner_why']}); the Runner alone "
                          f"{r['dask_runner_floor']:.2f} s "
                          f"({r['dask_runner_floor'] / r['plain']:.2f}x); load <= "
                          f"{max(r['dask_load']):.1f}", flush=True)
    from benchmarks.results_table import command_line, record

    for run in results["cold_numba"]:
        size = f"{run['chunksize'] // 1000}k"
        record(f"own.{size}.first_cold_numba",
               compares=f"own processor, first gradient pass of a new user (empty numba and "
               f"JAX caches; {args.events // 1000}k events, chunks of {size}): wall time",
               figure=round(run["first"], 2), unit="s", goal=f"<= {COLD_NUMBA_S:g} s",
               met=run["first"] <= COLD_NUMBA_S, command=command_line(__file__, None),
               details={"events": args.events, "chunksize": run["chunksize"],
                        "first_cpu": round(run["first_cpu"], 2),
                        "plain": round(run["plain"], 3),
                        "load_average_1min": round(max(run["load"]), 2),
                        "caches": "NUMBA_CACHE_DIR and JAX_COMPILATION_CACHE_DIR, empty "
                                  "temporary directories of the run"})
    for run in results["runs"]:
        size = f"{run['chunksize'] // 1000}k"
        ratios = run["ratios"]
        figures = [(f"own.{size}.first_{run['cache']}",
                    f"own processor, first gradient pass ({run['cache']} compilation cache, "
                    f"chunks of {size}) / plain coffea pass",
                    ratios["first"], GOALS[f"first_{run['cache']}"], run["load"][:1])]
        if run["cache"] == "warm":
            figures += [
                (f"own.{size}.later", f"own processor, later pass (chunks of {size}) / plain",
                 ratios["later_no_cache"], GOALS["later_no_cache"], run["load"][1:3]),
                (f"own.{size}.later_cached", f"own processor, later pass with CachedColumns "
                 f"(chunks of {size}) / plain", ratios["later_cache"], GOALS["later_cache"],
                 run["load"][3:5]),
                (f"own.{size}.later_cached_runner", f"own processor, later pass with "
                 f"CachedColumns through owncache.CachedRunner (chunks of {size}) / plain",
                 ratios["later_cached_runner"], GOALS["later_cache"], run["load"][5:7]),
            ]
            for prefix, executor in PARALLEL.items():
                figures += [
                    (f"own.{size}.{prefix}first", f"own processor on {executor}, first "
                     f"gradient pass (warm compilation cache; the workers started and their "
                     f"imports done, as kept ones have; chunks of {size}) / plain coffea pass",
                     ratios[f"{prefix}first"], GOALS["first_warm"], run[f"{prefix}load"][:1]),
                    (f"own.{size}.{prefix}later", f"own processor on {executor}, later pass "
                     f"(chunks of {size}) / the iterative later pass",
                     min(run[f"{prefix}later_no_cache"]) / min(run["later_no_cache"]), 1.0,
                     run[f"{prefix}load"][1:3]),
                    (f"own.{size}.{prefix}later_cached", f"own processor on {executor}, later "
                     f"pass with CachedColumns (chunks of {size}) / the iterative one",
                     min(run[f"{prefix}later_cache"]) / min(run["later_cache"]), 1.0,
                     run[f"{prefix}load"][3:5]),
                ]
            if "dask_later_cached_runner" in run:
                figures.append(
                    (f"own.{size}.dask_later_cached_runner", f"own processor on "
                     f"{PARALLEL['dask_']}, later pass with CachedColumns through "
                     f"owncache.CachedRunner wrapping the dask Runner (the kept chunks' "
                     f"outputs computed in the workers that keep them, without coffea's "
                     f"Runner; chunks of {size}) / plain",
                     ratios["dask_later_cached_runner"], GOALS["later_cache"],
                     run["dask_load"][5:7]))
        for name, compares, figure, goal, load in figures:
            details = {k: run[k] for k in ("chunksize", "cache", "plain", "first")}
            # the Runner with a processor that returns a constant: no pass goes below it
            details["runner_floor_ratio"] = round(run["runner_floor"] / run["plain"], 3)
            # the Runner reading the columns and nothing else: no pass that reads them
            # (a later pass without the column cache) goes below it
            details["read_floor_ratio"] = round(run["read_floor"] / run["plain"], 3)
            details["load_average_1min"] = round(max(load + run["plain_load"]), 2)
            details["compilation_cache"] = ("JAX_COMPILATION_CACHE_DIR, a temporary directory "
                                            "of the run (cold: empty; warm: the cold child's)")
            if "futures_first" in run:
                details["futures_first"] = run["futures_first"]
                details["futures_runner_floor_ratio"] = round(
                    run["futures_runner_floor"] / run["plain"], 3)
                details["futures_startup"] = round(run["futures_startup"], 3)
            if "dask_first" in run:
                details["dask_first"] = run["dask_first"]
                details["dask_runner_floor_ratio"] = round(
                    run["dask_runner_floor"] / run["plain"], 3)
                details["dask_first_ratio"] = round(run["ratios"]["dask_first"], 3)
                # the cluster's start-up, outside every pass
                details["dask_startup"] = round(run["dask_startup"], 3)
                # chunks whose columns the worker that got them kept, of the two passes'
                details["dask_later_cached_hits"] = [run["dask_column_hits"],
                                                     run["dask_column_lookups"] * 2 // 5]
                # how the CachedRunner's passes ran (chunks and workers)
                details["dask_cached_runner_why"] = run["dask_cached_runner_why"]
            record(name, compares=compares, figure=round(figure, 3), goal=f"<= {goal}x",
                   met=figure <= goal, command=command_line(__file__, None), details=details)


if __name__ == "__main__":
    main()
