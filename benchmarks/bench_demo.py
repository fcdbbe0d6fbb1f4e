"""The demo (configs/demo.yaml): the README's main job's wall time and where it goes,
or gradient optimisation against a grid scan.

``--main-job``: the README's main job, ``diffcoffea optimize configs/demo.yaml`` with its
data present (generated first if absent, not timed), in a fresh process (``python -m
analysis optimize configs/demo.yaml --overwrite -o <tmp>``, plots included): its wall
time (the median of ``--repeat`` fresh runs: one run on these shared machines swings by
30-40 %) against a bare ``python -c pass`` run just before (goal, issue 35: <= 10 s). Then
the same command again in this process with each phase timed (the phases' functions
wrapped with a clock: imports, config, evaluator set-up, each optimisation step, the
final soft and hard evaluation, the validation passes with their bootstrap replicas,
the report, the plots); the breakdown is printed and recorded with the wall time. CPU
time is recorded beside: each fresh run's (the command and its plot workers: on a
shared 2-core machine the wall time swings with the load, the CPU time much less) and
each phase's (this process, all its threads).

``--validation``: the validation with its bootstrap replicas (``Optimization.validation``
at the demo's initial point and a tighter one) in one process on the cached columns,
side by side: the one lanes pass against a pass per point and part (and the
replicas' totals' own pass), each measured ``--repeat`` times after a first
(compiling) round; their results are checked equal.

Default: runs, in one process and on the same generated data:
  1. ``diffcoffea optimize configs/demo.yaml`` (adam, 60 steps, default annealing);
  2. a hard-cut grid scan of the same four parameters (all points in one pass);
and prints passes over the data, hard-cut significance and wall time of each, and
how many passes a classic scan (one pass per grid point) would need.

    python benchmarks/bench_demo.py --main-job [--repeat 3]
    python benchmarks/bench_demo.py --validation [--repeat 3]
    python benchmarks/bench_demo.py [--grid-points small|medium]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRIDS = {
    # pT step 5 GeV, |eta| step 0.5, b-tag step 0.05, N jets 1..4
    "small": [
        "jet_pt_min=20:70:11",
        "jet_abs_eta_max=1.5:3.5:5",
        "btag_min=0.2:0.6:9",
        "min_jets=1:4:4",
    ],
    "medium": [
        "jet_pt_min=20:70:21",
        "jet_abs_eta_max=1.5:4.0:6",
        "btag_min=0.1:0.7:13",
        "min_jets=1:4:4",
    ],
}


MAIN_JOB_GOAL_S = 10.0

# (module, function or Class.method, phase): what the breakdown times.
PHASES = (
    ("analysis.config.loader", "load_config", "config"),
    ("analysis.cli.optimizecmd", "make_evaluator", "evaluator set-up (file checks)"),
    ("analysis.optimize.loop", "Optimization.do_step", "steps"),
    ("analysis.optimize.loop", "Optimization.final", "final soft + hard pass"),
    ("analysis.optimize.loop", "Optimization.hard", "hard cuts at the start"),
    ("analysis.optimize.loop", "Optimization.validation", "validation + bootstrap replicas"),
    # keep-best's passes (analysis.optimize.keepbest.track_hard): unclocked, they were
    # the 'rest' that grew from 6.8 to 16.1 s
    ("analysis.optimize.loop", "Optimization.validation_history",
     "keep-best: hard cuts at the checked steps"),
    ("analysis.cli.report", "hard_event_counts", "hard-cut event counts"),
    ("analysis.pipeline.results", "dataset_report", "per-dataset report"),
    ("analysis.cli.optimizecmd", "write_json", "results.json"),
    ("analysis.cli.plots", "histogram_data", "plots: the histograms' pass"),
    # the figures are drawn by the plot workers (analysis.cli.plotworker) while the
    # job goes on: what is left is the wait for the last one
    ("analysis.cli.plotworker", "PlotWorkers.wait", "plots: waiting for the plot workers"),
)


def _timed_phases(cpu: dict[str, float] | None = None) -> dict[str, float]:
    """Wrap each of :data:`PHASES` with a clock; returns the dict they add their wall
    time to (``cpu``: a dict they add this process's CPU time to, all its threads).
    A phase called inside another (``hard`` inside ``validation``) counts for the outer."""
    spent: dict[str, float] = {}
    cpu = {} if cpu is None else cpu
    active: list[str] = []
    for module, name, label in PHASES:
        mod = importlib.import_module(module)
        owner, attr = (mod, name) if "." not in name else (getattr(mod, name.split(".")[0]),
                                                           name.split(".")[1])
        fn = getattr(owner, attr)

        def clocked(*a, _fn=fn, _label=label, **k):
            if active:
                return _fn(*a, **k)
            active.append(_label)
            t, c = time.perf_counter(), time.process_time()
            try:
                return _fn(*a, **k)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.perf_counter() - t
                cpu[_label] = cpu.get(_label, 0.0) + time.process_time() - c
                active.pop()

        setattr(owner, attr, functools.wraps(fn)(clocked))
    command = sys.modules["analysis.cli.optimizecmd"]  # its own name for the loader
    command.load_config = sys.modules["analysis.config.loader"].load_config
    return spent


def _children_cpu() -> float:
    """User + system CPU time of this process's finished children (and theirs)."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def main_job(argv: list[str] | None, repeat: int) -> int:
    """``--main-job`` (module docstring)."""
    config = str(ROOT / "configs" / "demo.yaml")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory(prefix="bench_demo_") as tmp:
        cmd = [sys.executable, "-m", "analysis", "optimize", config, "--overwrite", "--quiet"]
        # data present: generated (and the caches filled) by a first run, not timed
        subprocess.run([*cmd, "-o", f"{tmp}/warm"], cwd=ROOT, env=env, check=True,
                       capture_output=True, timeout=1800)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare = time.perf_counter() - t0
        walls, cpus = [], []
        for _ in range(max(1, repeat)):
            t0, c0 = time.perf_counter(), _children_cpu()
            subprocess.run([*cmd, "-o", f"{tmp}/timed"], cwd=ROOT, env=env, check=True,
                           capture_output=True, timeout=1800)
            walls.append(time.perf_counter() - t0)
            cpus.append(_children_cpu() - c0)  # the command's and its plot workers
        wall = sorted(walls)[len(walls) // 2]
        steps = len(json.loads(Path(f"{tmp}/timed/results.json").read_text())["history"])
        # the breakdown: the same command in this process, phases clocked
        t0 = time.perf_counter()
        sys.path.insert(0, str(ROOT))
        import analysis.cli.commands  # noqa: F401  (the phases' modules, imported as the command does)
        import analysis.cli.optimizecmd  # noqa: F401
        import analysis.cli.plots  # noqa: F401
        import analysis.cli.plotworker  # noqa: F401
        import analysis.cli.report  # noqa: F401
        import analysis.optimize.loop  # noqa: F401
        import analysis.pipeline.results  # noqa: F401
        from analysis.cli.parser import main as cli
        imports = time.perf_counter() - t0
        cpu: dict[str, float] = {}
        spent = _timed_phases(cpu)
        t0, c0, w0 = time.perf_counter(), time.process_time(), _children_cpu()
        assert cli(["optimize", config, "--overwrite", "--quiet", "-o", f"{tmp}/phases"]) == 0
        in_process = time.perf_counter() - t0
        in_process_cpu, workers_cpu = time.process_time() - c0, _children_cpu() - w0
        history = json.loads(Path(f"{tmp}/phases/results.json").read_text())["history"]
    first_step = history[0]["wall_time_s"]
    later = [h["wall_time_s"] for h in history[1:]]
    phases = {"imports (jax, coffea, numba, awkward, ...)": imports, **spent}
    phases["steps: the first (reads the files, loads the kernels)"] = first_step
    median = sorted(later)[len(later) // 2] if later else 0.0
    phases[f"steps: the others ({len(later)}, median {median:.3f} s)"] = sum(later)
    del phases["steps"]
    phases["rest (output dir, lock, export, summary)"] = in_process - sum(
        v for k, v in spent.items() if k != "steps") - first_step - sum(later)
    load = os.getloadavg()[0]
    print(f"README main job: python -m analysis optimize configs/demo.yaml: {wall:.2f} s wall "
          f"(median of {', '.join(f'{w:.2f}' for w in walls)}; {steps} steps; python -c pass {bare:.2f} s; load average {load:.1f}; goal <= "
          f"{MAIN_JOB_GOAL_S} s: {'met' if wall <= MAIN_JOB_GOAL_S else 'not met'})")
    cpu["rest (output dir, lock, export, summary)"] = in_process_cpu - sum(cpu.values())
    print(f"CPU of the fresh runs (the command and its plot workers): "
          f"{', '.join(f'{c:.2f}' for c in cpus)} s")
    print(f"breakdown (the same job in this process: {imports + in_process:.2f} s; CPU "
          f"{in_process_cpu:.2f} s here, all threads, {workers_cpu:.2f} s in the plot workers):")
    for label, t in phases.items():
        c = cpu.get(label)
        print(f"  {label:<58} {t:6.2f} s" + ("" if c is None else f"  (CPU {c:5.2f} s)"))
    print(f"  {'steps, all (CPU only: the steps record their wall time)':<58} {'':6}    "
          f"(CPU {cpu.get('steps', 0.0):5.2f} s)")
    from benchmarks.results_table import command_line, record

    record("demo.main_job", compares="README main job (optimize configs/demo.yaml, data "
           "present, plots): wall time of a fresh process", figure=wall, unit="s",
           goal=f"<= {MAIN_JOB_GOAL_S} s", met=wall <= MAIN_JOB_GOAL_S,
           command=command_line(__file__, argv),
           details={"steps": steps, "runs_s": walls, "runs_cpu_s": cpus, "python_pass_s": bare,
                    "load_average": load, "in_process_s": imports + in_process,
                    "in_process_cpu_s": in_process_cpu, "plot_workers_cpu_s": workers_cpu,
                    "phases_s": phases, "phases_cpu_s": cpu})
    return 0


def validation(argv: list[str] | None, repeat: int) -> int:
    """``--validation`` (module docstring)."""
    from analysis.config.loader import load_config
    from analysis.driver.runner import Evaluator
    from analysis.optimize.loop import Optimization
    from benchmarks.results_table import command_line, record

    config = load_config(str(ROOT / "configs" / "demo.yaml"))
    tight = {"jet_pt_min": 60.0, "jet_abs_eta_max": 2.4, "btag_min": 0.5, "min_jets": 2}
    initial = config.initial_params()
    one: list[float] = []
    per_part: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench_demo_") as tmp, Evaluator(config) as ev:
        run = Optimization(config, ev, Path(tmp))
        start = run.hard(initial)  # the columns read and cached, the kernels loaded
        for i in range(repeat + 1):  # round 0 compiles: not counted
            run._replica_totals = None
            t0 = time.perf_counter()
            a = run.validation(initial, tight, start)
            t1 = time.perf_counter()
            run._replica_totals = None  # the pass-per-part path: the lanes pass switched off
            run._validation_lanes = lambda *args: None
            t2 = time.perf_counter()
            c = run.validation(initial, tight, start)
            t3 = time.perf_counter()
            del run._validation_lanes
            assert json.dumps(a, sort_keys=True) == json.dumps(c, sort_keys=True)
            if i:
                one.append(t1 - t0)
                per_part.append(t3 - t2)
    load = os.getloadavg()[0]
    m1, m6 = sorted(one)[len(one) // 2], sorted(per_part)[len(per_part) // 2]
    print(f"validation with 50 bootstrap replicas (demo, cached columns, load average "
          f"{load:.1f}): one pass {m1:.2f} s, a pass per point and part {m6:.2f} s "
          f"(medians of {repeat}); ratio {m6 / m1:.2f}")
    record("demo.validation_one_pass", compares="optimize's validation + 50 bootstrap "
           "replicas (demo, cached columns): a pass per point and part over one lanes pass",
           figure=m6 / m1, unit="x", goal="> 1", met=m6 > m1,
           command=command_line(__file__, argv),
           details={"one_pass_s": one, "per_part_s": per_part, "load_average": load})
    return 0


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    p = argparse.ArgumentParser()
    p.add_argument("--grid-points", choices=list(GRIDS), default="small")
    p.add_argument("--main-job", action="store_true",
                   help="the README main job's wall time and its phases (module docstring)")
    p.add_argument("--validation", action="store_true",
                   help="the validation's one pass against a pass per part (module docstring)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    if args.validation:
        return validation(argv, args.repeat)
    if args.main_job:
        return main_job(argv, args.repeat)
    from analysis.cli.parser import main as cli
    config = str(ROOT / "configs" / "demo.yaml")
    out = Path(tempfile.mkdtemp(prefix="bench_demo_"))

    t0 = time.perf_counter()
    assert cli(["optimize", config, "-o", str(out / "opt"), "--quiet", "--no-plots"]) == 0
    t_opt = time.perf_counter() - t0
    opt = json.loads((out / "opt" / "results.json").read_text())

    grid = [x for g in GRIDS[args.grid_points] for x in ("--grid", g)]
    t0 = time.perf_counter()
    assert cli(["scan", config, "-o", str(out / "scan"), "--quiet", *grid]) == 0
    t_scan = time.perf_counter() - t0
    scan = json.loads((out / "scan" / "scan.json").read_text())

    z_opt = opt["final"]["hard"]["significance"]
    z_grid = scan["best"]["significance"]
    print(f"{'method':<34} {'passes':>8} {'hard-cut Z_A':>13} {'wall time':>10}")
    print(
        f"{'gradient (adam, 60 steps)':<34} {opt['passes']:>8} {z_opt:>13.2f} {t_opt:>9.0f}s"
    )
    print(
        f"{'grid scan, ' + str(scan['n_points']) + ' points in one pass':<34} {1:>8} {z_grid:>13.2f} {t_scan:>9.0f}s"
    )
    print(f"{'classic grid scan (pass per point)':<34} {scan['n_points']:>8} {z_grid:>13.2f} {'':>10}")
    print(f"ratio gradient / grid best: {z_opt / z_grid:.4f}")
    print("optimised:", json.dumps(opt["final"]["hard"]["parameters"]))
    print("grid best:", json.dumps(scan["best"]["parameters"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
