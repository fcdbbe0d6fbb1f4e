"""A whole ``diffcoffea optimize`` vs the sum of its steps.

The demo config (configs/demo.yaml) on ``--events`` generated events (kept under
``--data-dir``, reused), ``--steps`` steps, plots on, run twice in this process through
the command line's own entry point: the first run compiles the kernels (or loads them
from the persistent compilation cache), the second runs with everything compiled. For
each run: the wall time of the whole command, the sum of its steps' wall times (from
results.json), and what the time outside the steps went to (the evaluator's setup and
first read are inside step 0; the final soft and hard evaluations; the histograms'
pass; the wait for the plot workers, which draw the figures while the job goes on). Goal: whole <= 1.3 x sum of steps + compilation, i.e. the second
run's ratio <= 1.3.

    python benchmarks/bench_optimize.py                   # 400k events, 8 steps
    python benchmarks/bench_optimize.py --events 40000 --steps 3
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1.3


def write_config(data_dir: Path, events: int, files: int, chunksize: int) -> Path:
    """configs/demo.yaml with its datasets resized and generated under ``data_dir``."""
    data = copy.deepcopy(yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text()))
    for name, ds in data["datasets"].items():
        ds["generate"].update(
            events=max(events // 2, 1), files=max(files // 2, 1), dir=str(data_dir / name)
        )
    data["executor"] = {"type": "iterative", "chunksize": chunksize}
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "demo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Phases:
    """Wall time spent in named functions of the package (patched with timers)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, owner, attr: str, label: str) -> None:
        inner = getattr(owner, attr)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - t0

        setattr(owner, attr, timed)


def one_run(config: Path, out: Path, steps: int) -> dict:
    from analysis.cli import plots
    from analysis.cli.parser import main as cli
    from analysis.cli.plotworker import PlotWorkers
    from analysis.optimize import loop as optimize
    phases = Phases()
    saved = [
        (optimize.Optimization, "final", optimize.Optimization.final),
        (plots, "histogram_data", plots.histogram_data),
        (PlotWorkers, "wait", PlotWorkers.wait),
    ]
    phases.wrap(optimize.Optimization, "final", "final soft + hard evaluations")
    # the figures are drawn by the plot workers (analysis.cli.plotworker) while the job
    # goes on: the main process runs the histograms' pass, then waits for the last figure
    phases.wrap(plots, "histogram_data", "the histograms' pass (binning + fill)")
    phases.wrap(PlotWorkers, "wait", "waiting for the plot workers")
    try:
        t0 = time.perf_counter()
        code = cli(["optimize", str(config), "-o", str(out), "--quiet", "--steps", str(steps)])
        total = time.perf_counter() - t0
    finally:
        for owner, attr, value in saved:
            setattr(owner, attr, value)
    assert code == 0
    report = json.loads((out / "results.json").read_text())
    step_times = [h["wall_time_s"] for h in report["history"]]
    return {
        "total": total,
        "steps": sum(step_times),
        "first_step": step_times[0],
        "later_step": min(step_times[1:]) if len(step_times) > 1 else step_times[0],
        "n_steps": len(step_times),
        "passes": report["passes"],
        "phases": phases.seconds,
        "hessian": "hessian" in report["final"]["soft"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=400_000, help="total events (default 400k)")
    p.add_argument("--files", type=int, default=4, help="files in total")
    p.add_argument("--chunksize", type=int, default=200_000, help="events per chunk")
    p.add_argument("--steps", type=int, default=8, help="optimisation steps")
    p.add_argument(
        "--data-dir",
        default=os.path.join(tempfile.gettempdir(), "diffcoffea-bench-optimize"),
        help="where the generated files are kept (reused if present)",
    )
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))

    config = write_config(
        Path(args.data_dir) / f"{args.events}x{args.files}", args.events, args.files, args.chunksize
    )
    out = Path(tempfile.mkdtemp(prefix="bench_optimize_"))
    runs = [one_run(config, out / f"run{i}", args.steps) for i in (1, 2)]
    print(
        f"diffcoffea optimize, demo config, {args.events} events in {args.files} files, chunks "
        f"of {args.chunksize}, {args.steps} steps, plots on; {os.cpu_count()} cores, load "
        f"average {os.getloadavg()[0]:.1f}"
    )
    print(
        "| run | whole [s] | sum of steps [s] | step 0 [s] | fastest step [s] | outside the "
        "steps [s] | passes | whole / steps |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, r in zip(("1 (compiles)", "2 (compiled)"), runs, strict=True):
        print(
            f"| {label} | {r['total']:.1f} | {r['steps']:.1f} | {r['first_step']:.2f} "
            f"| {r['later_step']:.2f} | {r['total'] - r['steps']:.1f} | {r['passes']} "
            f"| {r['total'] / r['steps']:.2f} |"
        )
    for label, r in zip(("1", "2"), runs, strict=True):
        parts = ", ".join(f"{k} {v:.2f} s" for k, v in r["phases"].items())
        print(f"run {label} outside the steps: {parts}")
    ratio = runs[1]["total"] / runs[1]["steps"]
    verdict = "met" if ratio <= GOAL else "not met"
    print(f"whole / sum of steps, compiled = {ratio:.2f}   (goal <= {GOAL}: {verdict})")
    from benchmarks.results_table import command_line, record

    record("optimize.overhead", compares="whole optimize run / sum of its steps (compiled)",
           figure=ratio, goal=f"<= {GOAL}x", met=ratio <= GOAL,
           command=command_line(__file__, argv),
           details={"total_s": runs[1]["total"], "steps_s": runs[1]["steps"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
