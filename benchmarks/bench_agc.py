"""The AGC-style object-set config's gradient pass vs a plain coffea processor doing
the same hard-cut selection with awkward + vector (issue 8), same files and chunks.

1. plain coffea: a ``ProcessorABC`` with the config's object sets as hard cuts at the
   initial parameter values (jets, b-jets from jets, muons + electrons), the three
   count conditions, and HT, the leading-trijet mass (``vector`` ``Momentum4D``) and
   the leading jet pT accumulated as weighted power sums (no derivatives);
2. diffcoffea: one ``Evaluator.run(order=1)`` of the config (soft selection, exact
   expectations, states + Jacobian with respect to the trainable parameters).

Both are timed after one warm-up pass (compilation, page cache); best of ``--repeat``.
By default the diffcoffea passes after the first take their columns from the column
cache (``cache: true``, the config default) while the plain processor reads the file
every time; ``--no-cache`` makes diffcoffea read the file on every pass too.

    python benchmarks/bench_agc.py                       # configs/agc_ttbar.yaml
    python benchmarks/bench_agc.py configs/agc_ttbar_v12.yaml
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pass import best_of  # noqa: E402  (one timing helper for the pass benchmarks)

GOAL = 2.0


def plain_processor(config):
    """The config's selection as hard cuts with awkward + vector, at the initial values."""
    import awkward as ak
    import numpy as np
    import vector
    from coffea import processor

    vector.register_awkward()
    init = config.initial_params()

    def value(cut):
        return init[cut.param] if cut.param is not None else cut.value

    def passes(coll, cuts):
        ok = ak.ones_like(coll.pt, dtype=bool)
        for c in cuts:
            v = abs(coll[c.var[4:]]) if c.var.startswith("abs_") else coll[c.var]
            t = value(c)
            ok = ok & {">": v > t, ">=": v >= t, "<": v < t, "<=": v <= t}[c.op]
        return ok

    class HardCuts(processor.ProcessorABC):
        def process(self, events):
            sets = {}
            for name, s in config.objects.items():
                if s.collection is not None:
                    coll = events[s.collection]
                    need = {"pt", "eta", "phi", "mass"} | {
                        c.var.removeprefix("abs_") for o in config.objects.values()
                        for c in o.cuts
                        if (o.collection or config.objects[o.from_].collection) == s.collection
                    }
                    coll = ak.zip({f: coll[f] for f in need}, with_name="Momentum4D")
                else:
                    coll = sets[s.from_]
                coll = coll[passes(coll, s.cuts)]
                sets[name] = coll[ak.argsort(coll.pt, ascending=False, stable=True)]
            ok = np.ones(len(events), dtype=bool)
            for e in config.selection.entries:
                n = sum(ak.num(sets[s]) for s in e.sets)
                t = init[e.param] if e.param is not None else e.value
                ok &= np.asarray({">": n > t, ">=": n >= t, "<": n < t, "<=": n <= t,
                                  "==": n == t}[e.op])
            w = np.asarray(events.genWeight, dtype=np.float64)[ok]
            jets = sets["jets"][ok]
            ht = np.asarray(ak.sum(jets.pt, axis=1), dtype=np.float64)
            m3j = np.asarray((jets[:, 0] + jets[:, 1] + jets[:, 2]).mass, dtype=np.float64)
            lead = np.asarray(jets[:, 0].pt, dtype=np.float64)
            out = [w.sum(), (w * w).sum()]
            for x in (ht, m3j, lead):
                out += [(w * x).sum(), (w * x * x).sum()]
            return {events.metadata["dataset"]: np.array(out)}

        def postprocess(self, accumulator):
            return accumulator

    return HardCuts()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("config", nargs="?", default=str(ROOT / "configs" / "agc_ttbar.yaml"))
    p.add_argument("--repeat", type=int, default=3, help="timed passes after the warm-up")
    p.add_argument("--chunksize", type=int, default=None)
    p.add_argument("--no-cache", action="store_true",
                   help="diffcoffea reads the files on every pass (no column cache)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from analysis.config.loader import load_config
    from analysis.driver.runner import Evaluator
    config = load_config(args.config)
    with Evaluator(config, chunksize=args.chunksize,
                   cache=False if args.no_cache else None) as ev:
        hard = plain_processor(config)
        p_warm, p_best, p_cpu = best_of(lambda: ev.process(hard, lambda: None), args.repeat)
        g_warm, g_best, g_cpu = best_of(lambda: ev.run(order=1), args.repeat)
        n_chunks = len(ev.chunks)
        cached = ev.cache is not None
    print(f"{args.config}: {n_chunks} chunks, {os.cpu_count()} cores, "
          f"column cache {'on' if cached else 'off'}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| pass | warm-up [s] | best [s] | CPU [s] |\n|---|---:|---:|---:|")
    print(f"| plain coffea, awkward + vector hard cuts | {p_warm:.2f} | {p_best:.3f} | {p_cpu:.3f} |")
    print(f"| diffcoffea gradient pass (order=1) | {g_warm:.2f} | {g_best:.3f} | {g_cpu:.3f} |")
    ratio = g_best / p_best
    print(f"ratio (best wall): {ratio:.2f} (goal <= {GOAL}); CPU: {g_cpu / p_cpu:.2f}")
    from benchmarks.results_table import command_line, record

    record("agc.pass", compares="AGC object-set gradient pass / plain coffea + vector pass",
           figure=ratio, goal=f"<= {GOAL}x", met=ratio <= GOAL,
           command=command_line(__file__, argv), details={"plain_s": p_best, "gradient_s": g_best})
    return 0


if __name__ == "__main__":
    sys.exit(main())
