"""Peak resident memory of cached gradient passes, with the column cache spilling to disk.

For each ``--events`` size N: the demo config on N generated events (half ttbar, half
Drell-Yan, files of ``--file-events`` = 200k events, kept under ``--data-dir`` and
reused), chunks of 200k, ``cache_memory_mb`` = ``--cache-mb`` (small: most chunks spill
to ``.npz`` files), one first pass (reads every chunk and fills the cache) and
``--passes`` cached passes at other parameter values. Each size runs in a fresh
process, so that its peak is its own. Reported per size: the peak RSS of the driver
process (``getrusage``), the peak of the sum of RSS over the driver and all its
descendants (dask or futures workers; sampled with psutil every 0.1 s), the cache's
chunks in memory and on disk, and the times. Goal: peak <= 2 GB and flat from 2M to 10M.

    python benchmarks/bench_memory.py --events 2000000 10000000
    python benchmarks/bench_memory.py --events 200000 --file-events 50000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pass import demo_config  # noqa: E402  (the same generated demo files)

GOAL_GB = 2.0


class TreeSampler:
    """Peak of the summed RSS of this process and its descendants, sampled in a thread."""

    def __init__(self, interval: float = 0.1) -> None:
        import psutil

        self.me = psutil.Process()
        self.interval = interval
        self.peak = 0
        self.largest = 0  # the largest single process
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        import psutil

        total = 0
        for p in [self.me, *self.me.children(recursive=True)]:
            try:
                rss = p.memory_info().rss
            except psutil.Error:  # a worker that just ended
                continue
            total += rss
            self.largest = max(self.largest, rss)
        self.peak = max(self.peak, total)
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def one_size(args) -> dict:
    """The first pass and ``args.passes`` cached passes on ``args.one`` events (this process)."""
    from analysis.driver.runner import Evaluator
    n = args.one
    files = max(2, 2 * -(-n // (2 * args.file_events)))  # whole files of <= file_events per dataset
    data_dir = Path(args.data_dir) / f"{n}x{files}"
    t0 = time.perf_counter()
    config = demo_config(data_dir, n, files, args.chunksize, args.executor)
    config.cache_memory_mb = args.cache_mb
    init = config.initial_params()
    with TreeSampler() as tree:
        with Evaluator(config) as ev:
            t_setup = time.perf_counter() - t0
            trainable = list(ev.plan.trainable_names)
            t0 = time.perf_counter()
            ev.run(order=1)
            t_first = time.perf_counter() - t0
            first_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
            tree.sample()
            tree_first = tree.peak / 2**30
            times = []
            for k in range(1, args.passes + 1):
                t0 = time.perf_counter()
                ev.run({p: init[p] * (1 + 0.01 * k * (-1) ** k) for p in trainable})
                times.append(time.perf_counter() - t0)
            cache = ev.cache
            where = {
                "chunks": len(ev.chunks),
                "in_memory": len(cache._memory),
                "spilled": cache.spilled,
                "on_workers": len(getattr(cache, "remote", {})),
                "memory_mb": cache.memory_bytes / 2**20,
            }
    return {
        "events": n,
        "files": files,
        "executor": args.executor,
        "cache_mb": args.cache_mb,
        "setup_s": t_setup,
        "first_s": t_first,
        "cached_s": min(times) if times else None,
        "driver_peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "driver_first_gb": first_peak,
        "tree_first_gb": tree_first,
        "tree_peak_gb": tree.peak / 2**30,
        "largest_gb": tree.largest / 2**30,
        **where,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--events", type=int, nargs="+", default=[2_000_000], help="sizes (total events)"
    )
    p.add_argument("--file-events", type=int, default=200_000, help="events per file")
    p.add_argument("--chunksize", type=int, default=200_000, help="events per chunk")
    p.add_argument("--passes", type=int, default=3, help="cached passes after the first")
    p.add_argument("--cache-mb", type=float, default=256, help="cache_memory_mb (per worker)")
    p.add_argument("--executor", choices=["iterative", "futures", "dask"], default="iterative")
    p.add_argument(
        "--data-dir",
        default=os.path.join(tempfile.gettempdir(), "diffcoffea-bench-memory"),
        help="where the generated files are kept (reused if present)",
    )
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in this process
    args = p.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    if args.one is not None:
        print(json.dumps(one_size(args)))
        return 0
    rows = []
    for n in args.events:
        cmd = [sys.executable, __file__, "--one", str(n)]
        for opt in ("file_events", "chunksize", "passes", "cache_mb", "executor", "data_dir"):
            cmd += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-4000:])
            return done.returncode
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"{args.executor} executor, chunks of {args.chunksize}, files of {args.file_events} "
        f"events, cache_memory_mb {args.cache_mb:g}, {args.passes} cached passes; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        "| events | chunks (memory/disk/workers) | first pass [s] | cached pass [s] "
        "| peak RSS driver [GB] | peak RSS driver + workers [GB] | largest process [GB] "
        "| of which in the first pass: driver / all [GB] |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        where = f"{r['chunks']} ({r['in_memory']}/{r['spilled']}/{r['on_workers']})"
        print(
            f"| {r['events']} | {where} | {r['first_s']:.1f} | {r['cached_s']:.1f} "
            f"| {r['driver_peak_gb']:.2f} | {r['tree_peak_gb']:.2f} | {r['largest_gb']:.2f} "
            f"| {r['driver_first_gb']:.2f} / {r['tree_first_gb']:.2f} |"
        )
    peak = max(r["tree_peak_gb"] for r in rows)
    verdict = "met" if peak <= GOAL_GB else "not met"
    print(f"largest peak = {peak:.2f} GB   (goal <= {GOAL_GB} GB: {verdict})")
    from benchmarks.results_table import command_line, record

    record("memory.peak", compares="peak RSS of cached passes (driver + workers)", figure=peak,
           unit="GB", goal=f"<= {GOAL_GB} GB", met=peak <= GOAL_GB,
           command=command_line(__file__, argv), details={"sizes": [r["events"] for r in rows]})
    if len(rows) > 1:
        growth = rows[-1]["tree_peak_gb"] / rows[0]["tree_peak_gb"]
        print(f"peak at {rows[-1]['events']} / peak at {rows[0]['events']} = {growth:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
