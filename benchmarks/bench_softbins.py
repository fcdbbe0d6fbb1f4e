"""Benchmark (issue 50): soft bins of an event-sum histogram, numba beside JAX.

The config of :mod:`bench_multiplicity` (generated Poisson(5.5)-jet events, a hard
pre-selection under soft pT and b-tag cuts, the histogram of ``sum(jets.pt)`` in one
likelihood channel) with soft bins on the HT histogram (``width: --width`` GeV) and its
interior edges trainable (7 edge parameters beside the 2 cuts' : two blocks of tangents on
numba). On every chunk's in-memory columns, side by side in one process: the gradient pass
(value + Jacobian) on numba and on JAX (the reference), each a warm-up (compilation) then
the best of ``--repeat``; beside them the same numba pass with hard bins (the HT
histogram's width 0: the event-sum kernel of hard bins), and the largest difference of
every state and Jacobian leaf between the two backends (relative to the leaf's largest
magnitude).

    python benchmarks/bench_softbins.py                  # 20k events, chunks of 10k
    python benchmarks/bench_softbins.py --events 4000 --chunksize 2000 --repeat 2

Writes ``benchmarks/results/softbins.esum_numba_vs_jax.json`` (numba / JAX, no goal).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_multiplicity import make_config  # noqa: E402  (the HT config on generated events)
from bench_pass import best_of, chunk_columns  # noqa: E402  (the shared timing helpers)

#: the record's detail keys of the three passes (``<key>_s``, ``<key>_cpu_s``,
#: ``<key>_first_s``: best wall, its CPU, the first pass)
KEYS = ("numba_soft", "jax_soft", "numba_hard")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=20_000, help="total events (default 20k)")
    p.add_argument("--chunksize", type=int, default=10_000, help="events per chunk")
    p.add_argument("--width", type=float, default=25.0, help="the soft bins' width [GeV]")
    p.add_argument("--repeat", type=int, default=3, help="timed passes after the warm-up")
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(),
                                                      "diffcoffea-bench-multiplicity"))
    args = p.parse_args(argv)

    import jax
    import numpy as np
    from bench_backends import largest_difference

    from analysis.driver.runner import Evaluator
    from analysis.pipeline.backend import chunk_state
    from analysis.pipeline.plan import initial_widths
    from analysis.stats import Histogram

    config = make_config(Path(args.data_dir) / str(args.events), args.events, args.chunksize,
                         ht={"width": args.width, "trainable_edges": True})
    with Evaluator(config, cache=False) as ev:
        plan = ev.plan
        cols = chunk_columns(ev)
    params = config.initial_params()
    theta = np.array([params[n] for n in plan.param_names], np.float64)
    widths = np.array(initial_widths(config), np.float64)
    hard = widths.copy()
    hard[[h.width_index for h in plan.hists if h.width_index is not None]] = 0.0

    def run(backend: str, w) -> list:
        return [chunk_state(c, plan, theta, w, order=1, backend=backend) for c in cols]

    rows = {}
    for name, backend, w in (("numba, soft bins", "numba", widths),
                             ("jax, soft bins", "jax", widths),
                             ("numba, hard bins (width 0)", "numba", hard)):
        rows[name] = best_of(lambda backend=backend, w=w: run(backend, w), args.repeat)

    def leaves(states) -> dict:
        out = {}
        for i, st in enumerate(states):
            for part in ("value", "jac"):
                flat = jax.tree_util.tree_leaves_with_path(
                    getattr(st.derived, part), is_leaf=lambda x: isinstance(x, Histogram))
                for path, leaf in flat:
                    if isinstance(leaf, Histogram):
                        leaf = np.concatenate([leaf.sumw_flow, leaf.sumw2_flow])
                    out[f"{i}/{part}/{jax.tree_util.keystr(path)}"] = np.asarray(leaf, np.float64)
        return out

    diff = largest_difference(leaves(run("jax", widths)), leaves(run("numba", widths)))
    enum = run("numba", widths)[0].enumeration
    load = os.getloadavg()[0]
    numba_s, jax_s = rows["numba, soft bins"][1], rows["jax, soft bins"][1]
    print(f"{args.events} events (Poisson(5.5) jets), {len(cols)} chunks of <= "
          f"{args.chunksize}, in memory; HT soft bins of {args.width} GeV, "
          f"{len(plan.trainable)} trainable parameters ({len(plan.trainable) - 2} edges); "
          f"jax {jax.__version__}, {os.cpu_count()} cores, load average {load:.1f}; "
          f"enumeration of chunk 0 (events, events over 12 uncertain, the most): {enum}")
    print(f"| {'gradient pass (value + Jacobian)':<34} | {'first [s]':>9} | {'best [s]':>8} | "
          f"{'CPU [s]':>7} |")
    for name, (warm, best, cpu) in rows.items():
        print(f"| {name:<34} | {warm:9.2f} | {best:8.3f} | {cpu:7.3f} |")
    print(f"numba / JAX {numba_s / jax_s:.3f}x (best wall); numba soft / hard bins "
          f"{numba_s / rows['numba, hard bins (width 0)'][1]:.2f}x; largest difference "
          f"numba vs JAX {diff:.1e}")

    from benchmarks.results_table import command_line, record

    record("softbins.esum_numba_vs_jax",
           compares="event-sum soft-bin histogram (HT, trainable edges) gradient pass on "
                    "in-memory chunks, numba / JAX on the CPU",
           figure=numba_s / jax_s, goal="", met=None, command=command_line(__file__, argv),
           details={"events": args.events, "chunksize": args.chunksize, "width": args.width,
                    "load_average": load, "largest_difference": diff,
                    "largest_uncertain": int(enum[2]) if enum else 0,
                    **{f"{key}_{what}": v[i] for key, v in zip(KEYS, rows.values(), strict=True)
                       for i, what in enumerate(("first_s", "s", "cpu_s"))},
                    "started": time.strftime("%Y-%m-%d %H:%M:%S")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
