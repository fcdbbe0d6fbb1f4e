"""How fast the command line answers: wall times of fresh processes (subprocess).

    python benchmarks/bench_startup.py [--repeat 5]

Measures, each in a new Python process started from the repository root (median and
best of ``--repeat``): ``python -m analysis --help``, ``--version``, the refusal of an
invalid config (an unknown key: exit 2, one line), ``import analysis.cli``, and, for
scale, a bare ``python -c pass``; with bytecode written (``PYTHONDONTWRITEBYTECODE``
is dropped from the children's environment, as for an installed package). Goal (issue
35): ``--help`` and the refusal <= 0.5 s.
Writes the figures to ``--output`` (JSON) and prints a table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 0.5


def _wall(cmd: list[str], *, expect: int) -> float:
    start = time.perf_counter()
    # bytecode written (the warm-up run writes it), as in any installed package: a
    # PYTHONDONTWRITEBYTECODE in the caller's environment would time compiling sources
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**env, "PYTHONPATH": os.pathsep.join(
                              filter(None, [str(ROOT), env.get("PYTHONPATH")]))})
    wall = time.perf_counter() - start
    if done.returncode != expect:
        raise RuntimeError(f"{cmd}: exit {done.returncode}, expected {expect}: {done.stderr}")
    return wall


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "typo.yaml"
        bad.write_text("datasets:\n  ttbar: {files: [x.root], wieght: genWeight}\n")
        cases = {
            "python -c pass": ([py, "-c", "pass"], 0),
            "import analysis.cli": ([py, "-c", "import analysis.cli"], 0),
            "diffcoffea --help": ([py, "-m", "analysis", "--help"], 0),
            "diffcoffea --version": ([py, "-m", "analysis", "--version"], 0),
            "refuse an invalid config": ([py, "-m", "analysis", "evaluate", str(bad)], 2),
        }
        figures = {}
        for name, (cmd, expect) in cases.items():
            _wall(cmd, expect=expect)  # warm the OS file cache and __pycache__
            times = [_wall(cmd, expect=expect) for _ in range(args.repeat)]
            figures[name] = {"median_s": statistics.median(times), "best_s": min(times)}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    result = {"goal_s": GOAL_S, "repeat": args.repeat, "load_average": load,
              "python": sys.version.split()[0], "figures": figures}
    width = max(map(len, figures))
    print(f"{'':{width}}  median [s]  best [s]  (goal <= {GOAL_S} s; load {load})")
    for name, f in figures.items():
        print(f"{name:{width}}  {f['median_s']:10.3f}  {f['best_s']:8.3f}")
    sys.path.insert(0, str(ROOT))
    from benchmarks.results_table import command_line, record

    for name, case in (("startup.help", "diffcoffea --help"),
                       ("startup.refuse", "refuse an invalid config")):
        figure = figures[case]["median_s"]
        record(name, compares=f"{case}: wall time of a fresh process (median)", figure=figure,
               unit="s", goal=f"<= {GOAL_S} s", met=figure <= GOAL_S,
               command=command_line(__file__, argv), details=result)
    return result


if __name__ == "__main__":
    main()
