"""When the column cache of an own processor (``CachedColumns``) cannot help: a wide
NanoAOD file (many branches, few events per chunk), where coffea's Runner spends a
later pass opening the file and building each chunk's NanoEvents (its schema over
every branch), which ``CachedColumns`` does not skip and ``CachedRunner`` does.

Same process, iterative executor, best of 3 per figure: a plain coffea pass (the same
hard cuts with awkward), the Runner alone (a processor returning a constant), a later
gradient pass of ``MeanJetPt`` through the Runner with ``CachedColumns`` (every chunk
kept) and through ``CachedRunner``; the loss and gradient of the two must agree
(1e-12). The processors are ``bench_own.py``'s (``_processors``). Run from the
repository root (the default file is the real NanoAOD v12 ttbar file of ``../shared/data``):

    python benchmarks/bench_wide_file.py --chunksize 50

Writes three figures, each against the plain pass, to ``benchmarks/results/wide_file.*.json``
(``benchmarks/results_table.py``): ``runner_alone``, ``later_cached`` (``CachedColumns``
through the Runner) and ``later_cached_runner`` (``CachedRunner``); no doc or issue states
a goal for them (the page that quotes them: ``docs/guide/column_cache.md``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", default=str(REPO.parent / "shared" / "data" / "nano_tt_v12.root"),
                   help="a NanoAOD file with many branches (default: the real v12 ttbar file)")
    p.add_argument("--chunksize", type=int, default=50, help="events per chunk (default 50)")
    p.add_argument("--repeat", type=int, default=3, help="best of this many passes (default 3)")
    args = p.parse_args(argv)

    import jax
    import uproot
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema

    from analysis import stats
    from analysis.data.owncache import CachedRunner
    from benchmarks.results_table import command_line, record

    # bench_own's processors: the same MeanJetPt, plain pass and Runner-alone floor
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_own import _processors

    MeanJetPt, Plain, Nothing, _ = _processors()

    with uproot.open(args.file) as f:
        tree = f["Events"]
        entries, branches = tree.num_entries, len(tree.keys(recursive=True))
    fileset = {"ttbar": [args.file]}

    def make():
        return processor.Runner(executor=processor.IterativeExecutor(status=False),
                                schema=NanoAODSchema, chunksize=args.chunksize)

    runner, cached = make(), CachedRunner(make())

    def best(call, n=args.repeat):
        times = []
        for _ in range(n):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        return min(times)

    def loss(run):
        f = stats.differentiable(lambda th: run(fileset, MeanJetPt(th), treename="Events")["ttbar"])
        return jax.value_and_grad(lambda th: stats.mean(f(th)["jet_pt"]))({"pt_min": 30.0})

    plain = best(lambda: runner(fileset, Plain(), treename="Events"))
    alone = best(lambda: runner(fileset, Nothing(), treename="Events"))
    first = best(lambda: loss(runner), n=1)  # reads and keeps every chunk
    later_cc = best(lambda: loss(runner))
    later_cr = best(lambda: loss(cached))
    a, b = loss(runner), loss(cached)
    assert abs(float(a[0]) - float(b[0])) <= 1e-12 * abs(float(a[0])), (a, b)
    assert cached.last == "cached", cached.why
    load = os.getloadavg()[0]
    chunks = -(-entries // args.chunksize)
    print(f"{Path(args.file).name}: {entries} events, {branches} branches, {chunks} chunks "
          f"of {args.chunksize}; load {load:.1f}")
    print(f"plain pass {plain:.3f} s; the Runner alone {alone:.3f} s ({alone / plain:.2f}x); "
          f"first gradient pass {first:.3f} s ({first / plain:.2f}x)")
    print(f"later pass, CachedColumns through the Runner {later_cc:.3f} s ({later_cc / plain:.2f}x); "
          f"through CachedRunner {later_cr:.3f} s ({later_cr / plain:.2f}x)")
    details = {"file": Path(args.file).name, "events": entries, "branches": branches,
               "chunks": chunks, "chunksize": args.chunksize, "repeat": args.repeat,
               "plain_s": plain, "runner_alone_s": alone, "first_s": first,
               "later_cached_s": later_cc, "later_cached_runner_s": later_cr,
               "load_average_1min": round(load, 2)}
    command = command_line(__file__, argv)
    for name, what, seconds in (
        ("runner_alone", "coffea's Runner alone (a processor returning a constant)", alone),
        ("later_cached", "later gradient pass, CachedColumns through the Runner", later_cc),
        ("later_cached_runner", "later gradient pass through CachedRunner", later_cr),
    ):
        record(f"wide_file.{name}",
               compares=f"wide NanoAOD file ({branches} branches, {chunks} chunks of "
                        f"{args.chunksize}): {what} / plain coffea pass",
               figure=seconds / plain, goal="", met=None, command=command,
               details=details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
