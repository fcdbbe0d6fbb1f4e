"""Cached gradient passes on a dask LocalCluster: 2 workers vs 1.

On the same generated files as ``bench_pass.py`` (the demo config, half ttbar, half
Drell-Yan), for each cluster size: one ``Evaluator`` with the column cache, a first
pass (each worker reads its chunks and keeps their columns), then ``--repeat`` cached
passes at other parameter values each time (as optimisation steps), each chunk run on
the worker that keeps it. Reported: the best cached pass per cluster size and the
speed-up 2 workers / 1 worker (goal >= 1.7), with how the chunks were spread.

``--threads 1`` (default) starts the workers with one compute thread each for XLA and
numba (``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``,
``NUMBA_NUM_THREADS=1``; what the Evaluator's own LocalCluster sets unless the user set
them), so that 2 workers do not fight over the cores; ``--threads 0`` sets the
libraries' defaults (a pool as large as the machine per worker).

    python benchmarks/bench_dask.py                    # 2M events, 8 files
    python benchmarks/bench_dask.py --events 400000    # reduced
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pass import best_of, demo_config  # noqa: E402  (one config and timing helper)

GOAL = 1.7

SINGLE_THREAD_ENV = {
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "NUMBA_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}


def cached_passes(config, workers: int, repeat: int) -> dict:
    """First pass and best cached pass on a LocalCluster of ``workers`` workers."""
    from analysis.driver.runner import Evaluator
    init = config.initial_params()
    steps = iter(range(1, 1000))
    with Evaluator(config, executor="dask", workers=workers) as ev:
        trainable = list(ev.plan.trainable_names)
        t0 = time.perf_counter()
        first = ev.run(order=1)
        t_first = time.perf_counter() - t0

        def cached_pass():
            k = next(steps)
            ev.run({n: init[n] * (1 + 0.01 * (1 + k % 5) * (-1) ** k) for n in trainable})

        def worker_cpu() -> dict[str, float]:
            return ev._client.run(time.process_time)

        cpu0 = worker_cpu()
        warm, best, cpu = best_of(cached_pass, repeat)
        cpu1 = worker_cpu()
        # CPU time of the workers (all threads) per cached pass: the work to share, and
        # the busiest worker's share (the wall time on free cores cannot be shorter)
        per_worker = [(cpu1[a] - cpu0.get(a, 0.0)) / (repeat + 1) for a in cpu1]
        worker = sum(per_worker)
        busiest = max(per_worker)
        spread = Counter(ev.cache.remote.values())
        assert len(ev.cache) == len(ev.chunks) and ev.cache.memory_bytes == 0
    return {
        "first": t_first,
        "warm": warm,
        "best": best,
        "cpu": cpu,
        "worker_cpu": worker,
        "busiest_cpu": busiest,
        "spread": sorted(spread.values(), reverse=True),
        "states": first,
    }


def relative_difference(a, b) -> float:
    """Largest relative difference between the numbers of two results.json-like nests."""
    import numpy as np

    if isinstance(a, dict):
        return max((relative_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (list, tuple)):
        return max((relative_difference(x, y) for x, y in zip(a, b)), default=0.0)
    if isinstance(a, (int, float)) and not isinstance(a, bool) and a is not None:
        x, y = float(a), float(b)
        if not (np.isfinite(x) and np.isfinite(y)):
            return 0.0 if x == y or (np.isnan(x) and np.isnan(y)) else float("inf")
        return abs(x - y) / max(abs(x), abs(y), 1e-300)
    return 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=2_000_000, help="total events (default 2M)")
    p.add_argument("--files", type=int, default=8, help="files in total (default 8)")
    p.add_argument("--chunksize", type=int, default=200_000, help="events per chunk")
    p.add_argument("--repeat", type=int, default=3, help="timed cached passes after a warm-up")
    p.add_argument(
        "--threads",
        type=int,
        choices=[0, 1],
        default=1,
        help="1: one XLA/numba thread per worker (default); 0: the libraries' defaults",
    )
    p.add_argument(
        "--data-dir",
        default=os.path.join(tempfile.gettempdir(), "diffcoffea-bench"),
        help="where the generated files are kept (reused if present)",
    )
    args = p.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    import jax

    from analysis.pipeline.plan import build_plan
    from analysis.pipeline.results import dataset_report
    # read by the worker processes when they start (the driver's XLA is already up)
    if args.threads == 1:
        os.environ.update(SINGLE_THREAD_ENV)  # what the Evaluator's LocalCluster sets too
    else:  # set, so that the Evaluator keeps them: the libraries' defaults
        cores = str(os.cpu_count() or 1)
        os.environ.update({"XLA_FLAGS": "", "NUMBA_NUM_THREADS": cores, "OMP_NUM_THREADS": cores})
    data_dir = Path(args.data_dir) / f"{args.events}x{args.files}"
    config = demo_config(data_dir, args.events, args.files, args.chunksize, "dask")
    one = cached_passes(config, 1, args.repeat)
    two = cached_passes(config, 2, args.repeat)
    n_chunks = sum(one["spread"])
    load = os.getloadavg()[0]
    print(
        f"{args.events} events in {args.files} files, {n_chunks} chunks of <= {args.chunksize}, "
        f"dask LocalCluster; jax {jax.__version__}, {os.cpu_count()} cores, load average "
        f"{load:.1f}; {'1 thread' if args.threads else 'default threads'} per worker"
    )
    print(
        f"| {'workers':>7} | {'first pass [s]':>14} | {'cached warm-up [s]':>18} "
        f"| {'cached best [s]':>15} | {'worker CPU per pass [s]':>23} "
        f"| {'busiest worker CPU [s]':>22} | {'driver CPU [s]':>14} | {'chunks per worker':>17} |"
    )
    print(
        f"|{'-' * 8}:|{'-' * 15}:|{'-' * 19}:|{'-' * 16}:|{'-' * 24}:|{'-' * 23}:|{'-' * 15}:"
        f"|{'-' * 18}:|"
    )
    for n, r in ((1, one), (2, two)):
        spread = "/".join(str(x) for x in r["spread"])
        print(
            f"| {n:>7} | {r['first']:>14.2f} | {r['warm']:>18.2f} | {r['best']:>15.2f} "
            f"| {r['worker_cpu']:>23.2f} | {r['busiest_cpu']:>22.2f} | {r['cpu']:>14.2f} "
            f"| {spread:>17} |"
        )
    speedup = one["best"] / two["best"]
    verdict = "met" if speedup >= GOAL else "not met"
    print(
        f"speed-up cached pass 2 workers / 1 worker = {speedup:.2f}   (goal >= {GOAL}: {verdict})"
    )
    from benchmarks.results_table import command_line, record

    record("dask.speedup", compares="cached pass, 1 dask worker / 2 workers", figure=speedup,
           goal=f">= {GOAL}x", met=speedup >= GOAL, command=command_line(__file__, argv))
    # the two clusters computed the same statistics (a check, not a benchmark)
    plan = build_plan(config)
    worst = max(
        relative_difference(
            dataset_report(one["states"][name], plan), dataset_report(two["states"][name], plan)
        )
        for name in one["states"]
    )
    print(f"largest relative difference 1 vs 2 workers = {worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
