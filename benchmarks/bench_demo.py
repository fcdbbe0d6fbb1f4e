"""Gradient optimisation vs grid scan on the demo (configs/demo.yaml).

Runs, in one process and on the same generated data:
  1. ``diffcoffea optimize configs/demo.yaml`` (adam, 60 steps, default annealing);
  2. a hard-cut grid scan of the same four parameters (all points in one pass);
and prints passes over the data, hard-cut significance and wall time of each, and
how many passes a classic scan (one pass per grid point) would need.

    python benchmarks/bench_demo.py [--grid-points small|medium]
"""

from __future__ import annotations

import argparse
import json
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


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from analysis.cli.parser import main as cli
    p = argparse.ArgumentParser()
    p.add_argument("--grid-points", choices=list(GRIDS), default="small")
    args = p.parse_args()
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
