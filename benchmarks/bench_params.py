"""Benchmark (issue 49): no cliff in the number of parameters. A states pass with 12
trainable parameters against the same pass with 4, side by side in one process.

Run from the repository root:

    python benchmarks/bench_params.py                          # 400k events, 200k-event chunks
    python benchmarks/bench_params.py --events 40000 --chunksize 20000   # reduced

Data (seeded, in memory): ``--events`` generated ttbar events
(:func:`analysis.data.generate.generate_events`, Poisson(6) jets per event), cut into
chunks of ``--chunksize``. Config: four object sets of jets (``jets``; ``bjets``,
``central`` and ``forward`` derived from them), ``>= N`` jets, ``>= 1`` b-jet, ``<= 2``
forward jets and a MET cut, the jets' pT moments and HT. The 12-parameter pass makes
every cut threshold trainable; the 4-parameter pass holds 8 of them at the same values
(the same selection, the same states: only the Jacobian's columns differ).

Both passes run on the ``auto`` backend (which one is printed: numba, in blocks of
tangents past 7 parameters, :mod:`analysis.pipeline.backends.numba.blocks`), prepared
once and run on every chunk's in-memory columns, best of ``--repeat`` after a warm-up;
the wall and CPU times, their ratio and the process's peak memory (``ru_maxrss``) are
printed. Writes ``benchmarks/results/params.twelve_vs_four.json``. Goal (issue 49):
the 12-parameter pass <= 3x the 4-parameter pass, peak memory <= 3 GB at 200k-event
chunks.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_pass import best_of  # noqa: E402  (the shared timing helper)

GOAL = 3.0
GOAL_GB = 3.0

#: name -> (init, lower, upper); the 4-parameter pass trains the first four
PARAMS = {
    "jet_pt": (30.0, 25.0, 60.0), "btag_min": (0.5, 0.1, 0.9), "min_jets": (4, 2, 6),
    "met_min": (30.0, 0.0, 80.0),
    "jet_eta": (2.4, 1.5, 3.0), "jet_mass": (40.0, 10.0, 80.0), "central_eta": (1.5, 0.8, 2.0),
    "central_pt": (40.0, 25.0, 80.0), "fwd_eta": (1.8, 1.2, 2.4), "fwd_pt": (35.0, 25.0, 60.0),
    "min_b": (1, 0, 3), "max_fwd": (2, 0, 4),
}


def make_config(trainable: int) -> dict:
    """The four-set selection with the first ``trainable`` of :data:`PARAMS` trainable."""
    names = list(PARAMS)
    params = {n: {"init": i, "bounds": [lo, hi], "trainable": k < trainable}
              for k, (n, (i, lo, hi)) in enumerate(PARAMS.items())}
    assert len(names) == 12

    def cut(var, op, name, width):
        return {"var": var, "op": op, "param": name, "width": width}

    return {
        "datasets": {"ttbar": {"files": ["unused.root"], "weight": "genWeight"}},
        "parameters": params,
        "objects": {
            "jets": {"collection": "Jet", "cuts": [
                cut("pt", ">", "jet_pt", 3.0), cut("abs_eta", "<", "jet_eta", 0.1),
                cut("mass", "<", "jet_mass", 3.0)]},
            "bjets": {"from": "jets", "cuts": [cut("btagDeepFlavB", ">", "btag_min", 0.03)]},
            "central": {"from": "jets", "cuts": [cut("abs_eta", "<", "central_eta", 0.1),
                                                 cut("pt", ">", "central_pt", 3.0)]},
            "forward": {"from": "jets", "cuts": [cut("abs_eta", ">", "fwd_eta", 0.1),
                                                 cut("pt", ">", "fwd_pt", 3.0)]},
        },
        "selection": [
            {"count": "jets", "op": ">=", "param": "min_jets", "width": 0.5},
            {"count": "bjets", "op": ">=", "param": "min_b", "width": 0.5},
            {"count": "forward", "op": "<=", "param": "max_fwd", "width": 0.5},
            {"var": "MET.pt", "op": ">", "param": "met_min", "width": 5.0},
        ],
        "observables": [
            {"name": "jet_pt", "x": "jets.pt", "stats": ["mean", "std"]},
            {"name": "central_pt", "x": "central.pt", "stats": ["mean"]},
            {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
        ],
    }


def chunks(events: int, chunksize: int, seed: int = 49) -> list:
    """``events`` generated ttbar events as in-memory chunk columns of ``chunksize``."""
    import awkward as ak

    from analysis.data.generate import generate_events
    from analysis.pipeline.layout import ChunkColumns

    out = []
    for i, start in enumerate(range(0, events, chunksize)):
        n = min(chunksize, events - start)
        ev = generate_events("ttbar", n, seed=seed + i, mean_jets=6.0)
        jet = ev["Jet"]
        flat = {f: np.asarray(ak.flatten(jet[f]), np.float64)
                for f in ("pt", "eta", "mass", "btagDeepFlavB")}
        out.append(ChunkColumns(n, np.asarray(ev["genWeight"], np.float64),
                                {"MET.pt": np.asarray(ev["MET_pt"], np.float64)},
                                {"Jet": (np.asarray(ak.num(jet), np.int64), flat)}))
    return out


def prepared(trainable: int, order: int = 1):
    """The pass of :func:`make_config` (``trainable`` parameters), prepared once by the
    ``auto`` chooser; returns ``(prepared, plan)``."""
    from analysis.config.loader import config_from_dict
    from analysis.pipeline.backend import Backend
    from analysis.pipeline.plan import build_plan, initial_widths
    from analysis.pipeline.request import Request

    config = config_from_dict(make_config(trainable), source="bench_params")
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names], np.float64)
    request = Request(theta, np.array(initial_widths(config)), order=order)
    return Backend().chooser.prepare(plan, request), plan


def peak_gb() -> float:
    """This process's peak resident memory so far (``ru_maxrss``: KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; returns its figures (also printed and recorded)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--chunksize", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-record", action="store_true", help="print only")
    args = ap.parse_args(argv)

    cols = chunks(args.events, args.chunksize)
    print(f"{args.events} events (ttbar, Poisson(6) jets), {len(cols)} chunks of "
          f"<= {args.chunksize}; load average {os.getloadavg()[0]:.1f}")
    rows = {}
    for label, trainable, order in (("values", 4, 0), ("4 parameters", 4, 1),
                                    ("12 parameters", 12, 1)):
        prep, plan = prepared(trainable, order)

        def run(prep=prep):
            for c in cols:
                prep.run(c)

        warm, wall, cpu = best_of(run, args.repeat)
        rows[label] = {"wall_s": wall, "cpu_s": cpu, "warm_s": warm, "peak_gb": peak_gb(),
                       "backend": prep.engine.name, "trainable": len(plan.trainable)}
        print(f"  {label:>14}: {wall:7.3f} s wall, {cpu:7.3f} s CPU (first {warm:.2f} s) on "
              f"{prep.engine.name}; peak memory so far {rows[label]['peak_gb']:.2f} GB")
    four, twelve = rows["4 parameters"], rows["12 parameters"]
    ratio = twelve["wall_s"] / four["wall_s"]
    ratio_cpu = twelve["cpu_s"] / four["cpu_s"]
    peak = peak_gb()
    met = ratio <= GOAL and peak <= GOAL_GB and twelve["backend"] == "numba"
    print(f"ratio 12 / 4 parameters = {ratio:.2f}x wall, {ratio_cpu:.2f}x CPU "
          f"(goal <= {GOAL:g}x); peak memory {peak:.2f} GB (goal <= {GOAL_GB:g} GB); "
          f"load average {os.getloadavg()[0]:.1f}")
    out = {"ratio": ratio, "ratio_cpu": ratio_cpu, "peak_gb": peak, "rows": rows}
    if not args.no_record:
        from results_table import command_line, record

        command = command_line(__file__, argv)
        record("params.twelve_vs_four",
               compares="states pass, 12 / 4 trainable parameters (four object sets)",
               figure=ratio, goal=f"<= {GOAL:g}x, <= {GOAL_GB:g} GB", met=met, command=command,
               details={"events": args.events, "chunksize": args.chunksize,
                        "ratio_cpu": ratio_cpu, "peak_gb": peak,
                        "load": os.getloadavg()[0],
                        **{f"{k} {m}": v[m] for k, v in rows.items()
                           for m in ("wall_s", "cpu_s", "backend")}})
    return out


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s in all)")
