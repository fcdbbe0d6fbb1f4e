"""Benchmark (issue 33): the gradient pass of an HT-histogram likelihood at natural jet
multiplicities, against the plain coffea pass that fills the same hard-cut histogram.

Run from the repository root:

    python benchmarks/bench_multiplicity.py                  # 200k events, Poisson(5.5) jets
    python benchmarks/bench_multiplicity.py --events 20000   # reduced

Data (seeded, made once under ``--data-dir``): ``events`` generated NanoAOD-layout
events (:func:`analysis.data.generate.write_dataset` with ``mean_jets=5.5``: a
Poisson(5.5) number of jets per event), half ttbar (signal), half Drell-Yan
(background), 2 files each. Config: jets with a hard pre-selection (|eta| < 2.4,
pT > 25 GeV, width 0) under a soft pT cut (``jet_pt_min``, width 2 GeV), b-jets with a
soft b-tag cut, ``>= 4`` jets and ``>= 1`` b-jet, the histogram of ``sum(jets.pt)`` in
one likelihood channel with lnN normalisations.

1. plain coffea: a ``ProcessorABC`` applying the same cuts hard (at the initial values)
   with awkward and filling ``hist.Hist`` (weighted) with the events' HT;
2. diffcoffea: one ``Evaluator.run(order=1)``: the soft histogram templates and their
   Jacobian with respect to the 2 parameters, reading the files (column cache off);
3. the floor: the same ``Evaluator.run`` at width 0 and ``order=0`` (the hard-cut
   histogram filled by the numba kernel: no enumeration, no derivatives);
4. reading alone: the same coffea pass reading what the plain pass reads, nothing
   else; with the event-sum kernel's own time (on the in-memory columns, within the
   numba computation of value + Jacobian) it is what the exact pass would cost if
   reading and computing did not overlap (the iterative executor computes a chunk
   while it reads the next: :mod:`analysis.data.overlap`).

Both on the iterative executor over the same preprocessed chunks, timed after one
warm-up pass (compilation, page cache), best of ``--repeat``. Also measured, on every
chunk's in-memory columns: the share of the kernel's time spent on the events with more
than 12 uncertain objects (each chunk's events split into those with at most 12 and
the others, each part evaluated alone, value + Jacobian).

Writes its figure to ``benchmarks/results/multiplicity.pass.json``. Goal (issue 33): ratio <= 1.0x.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_pass import best_of, chunk_columns  # noqa: E402  (the shared timing helpers)

GOAL = 1.0
MEAN_JETS = 5.5
EDGES = [100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 800.0, 1000.0, 1500.0]


def make_config(data_dir: Path, events: int, chunksize: int, *, ht: dict | None = None):
    """The HT likelihood config on the generated files (written once); ``ht``: more keys
    of the HT histogram (soft bins: ``benchmarks/bench_softbins.py``)."""
    from analysis.config.loader import config_from_dict
    from analysis.data.generate import write_dataset

    datasets = {}
    for i, (name, process, role, xsec) in enumerate(
            (("ttbar", "ttbar", "signal", 831.76), ("dy", "dy", "background", 6077.0))):
        where = data_dir / name
        stamp = where / "done.json"
        want = {"events": events // 2, "mean_jets": MEAN_JETS, "seed": 33 + i}
        if not stamp.is_file() or json.loads(stamp.read_text()) != want:
            files = write_dataset(where, process=process, n_events=events // 2, n_files=2,
                                  seed=33 + i, mean_jets=MEAN_JETS)
            stamp.write_text(json.dumps(want))
        files = sorted(str(p) for p in where.glob(f"{process}_*.root"))
        datasets[name] = {"files": files, "weight": "genWeight", "role": role, "xsec": xsec}
    data = {
        "datasets": datasets,
        "lumi": 0.01,
        "executor": {"type": "iterative", "chunksize": chunksize},
        "parameters": {"jet_pt_min": {"init": 30.0, "bounds": [25.0, 60.0]},
                       "btag_min": {"init": 0.3, "bounds": [0.05, 0.95]}},
        "objects": {
            "jets": {"collection": "Jet", "cuts": [
                {"var": "abs_eta", "op": "<", "value": 2.4, "width": 0},
                {"var": "pt", "op": ">", "value": 25.0, "width": 0},
                {"var": "pt", "op": ">", "param": "jet_pt_min", "width": 2.0}]},
            "bjets": {"from": "jets", "cuts": [
                {"var": "btagDeepFlavB", "op": ">", "param": "btag_min", "width": 0.02}]},
        },
        "selection": [{"count": "jets", "op": ">=", "value": 4},
                      {"count": "bjets", "op": ">=", "value": 1}],
        "histograms": [{"name": "ht", "x": "sum(jets.pt)", "edges": EDGES, **(ht or {})}],
        "systematics": [{"name": "dy_norm", "type": "lnN", "datasets": ["dy"], "kappa": 1.1},
                        {"name": "lumi", "type": "lnN", "datasets": ["ttbar", "dy"],
                         "kappa": 1.025}],
        "likelihood": {"channels": {"sr": {"histogram": "ht"}}, "mc_stat": True},
        "objective": {"terms": [{"type": "discovery_significance"}]},
        "output": {"dir": str(data_dir / "out")},
    }
    return config_from_dict(data, source="bench_multiplicity", base_dir=ROOT / "configs")


def plain_processor(config):
    """The same selection as hard cuts with awkward, HT filled into ``hist.Hist``."""
    import awkward as ak
    import hist
    import numpy as np
    from coffea import processor

    init = config.initial_params()

    class HardCuts(processor.ProcessorABC):
        def process(self, events):
            jets = events.Jet
            good = (abs(jets.eta) < 2.4) & (jets.pt > 25.0) & (jets.pt > init["jet_pt_min"])
            nb = ak.sum(good & (jets.btagDeepFlavB > init["btag_min"]), axis=1)
            ok = (ak.sum(good, axis=1) >= 4) & (nb >= 1)
            ht = ak.sum(ak.values_astype(jets.pt, np.float64)[good], axis=1)[ok]
            h = hist.Hist(hist.axis.Variable(EDGES), storage=hist.storage.Weight())
            h.fill(np.asarray(ht), weight=np.asarray(events.genWeight[ok], dtype=np.float64))
            return {events.metadata["dataset"]: h}

        def postprocess(self, accumulator):
            return accumulator

    return HardCuts()


def read_processor():
    """Reads what the plain pass reads (the jets' pT, eta and b-tag, the weight) and
    nothing else: the part of every pass that no computation removes."""
    import awkward as ak
    from coffea import processor

    class ReadOnly(processor.ProcessorABC):
        def process(self, events):
            jets = events.Jet
            ak.num(jets)
            for x in (jets.pt, jets.eta, jets.btagDeepFlavB):
                ak.to_numpy(ak.flatten(x))
            ak.to_numpy(events.genWeight)
            return {}

        def postprocess(self, accumulator):
            return accumulator

    return ReadOnly()


def kernel_split(ev, config, repeat: int) -> dict:
    """On every chunk's in-memory columns: the numba computation of the gradient pass
    (value + Jacobian, no reading) and, within it, the event-sum kernel's own time
    (:func:`analysis.pipeline.backends.numba.kernels._numba_esum.event_sum_bins`, timed
    around each call of it), best of ``repeat``."""
    import numpy as np

    from analysis.pipeline.backend import chunk_state
    from analysis.pipeline.backends.numba import fasthist
    from analysis.pipeline.plan import initial_widths
    plan = ev.plan
    theta = np.array([config.initial_params()[n] for n in plan.param_names])
    widths = np.array(initial_widths(config))
    cols = chunk_columns(ev)
    spent = [0.0, 0.0]  # wall, CPU (every thread of the process)
    real = fasthist._run_dynamic

    def timed(kernel, *args, **kw):
        if getattr(getattr(kernel, "py_func", kernel), "__name__", "") != "event_sum_bins":
            return real(kernel, *args, **kw)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return real(kernel, *args, **kw)
        finally:
            spent[0] += time.perf_counter() - t0
            spent[1] += time.process_time() - c0

    best = (float("inf"), 0.0, 0.0, 0.0)
    fasthist._run_dynamic = timed
    try:
        for _ in range(repeat + 1):  # the first: warm-up
            spent[:] = [0.0, 0.0]
            t0, c0 = time.perf_counter(), time.process_time()
            for c in cols:
                chunk_state(c, plan, theta, widths, order=1)
            best = min(best, (time.perf_counter() - t0, *spent, time.process_time() - c0))
    finally:
        fasthist._run_dynamic = real
    return {"kernel_s": best[0], "event_sum_kernel_s": best[1],
            "event_sum_kernel_cpu_s": best[2], "kernel_cpu_s": best[3]}


def subset(cols, keep):
    """The events ``keep`` (bool mask) of chunk columns ``cols``."""
    import numpy as np

    from analysis.pipeline.layout import ChunkColumns
    colls = {}
    for name, (counts, flat) in cols.collections.items():
        per_object = np.repeat(keep, counts)
        colls[name] = (counts[keep], {f: v[per_object] for f, v in flat.items()})
    return ChunkColumns(n_events=int(keep.sum()), weight=cols.weight[keep],
                        events={k: v[keep] for k, v in cols.events.items()}, collections=colls)


def heavy_share(ev, config, repeat: int) -> dict:
    """Kernel time (value + Jacobian) of the events with > 12 uncertain objects over
    that of all events, each chunk split into its light and heavy events."""
    import numpy as np

    from analysis.pipeline.backend import chunk_state
    from analysis.pipeline.backends.jax.passes import uncertain_per_event
    from analysis.pipeline.plan import initial_widths
    plan = ev.plan
    theta = np.array([config.initial_params()[n] for n in plan.param_names])
    widths = np.array(initial_widths(config))
    parts: list = [[], []]
    counts = []
    for c in chunk_columns(ev):
        n = uncertain_per_event(c, plan, theta, widths)["Jet"]
        counts.append(n)
        for k, keep in enumerate((n <= 12, n > 12)):
            if keep.any():
                parts[k].append(subset(c, keep))

    def run(cols):
        for c in cols:
            chunk_state(c, plan, theta, widths, order=1)

    light = best_of(lambda: run(parts[0]), repeat)[1]
    heavy = best_of(lambda: run(parts[1]), repeat)[1] if parts[1] else 0.0
    n = np.concatenate(counts)
    return {"events": int(n.size), "heavy_events": int((n > 12).sum()),
            "largest_uncertain": int(n.max(initial=0)),
            "uncertain_histogram": np.bincount(n).tolist(),
            "kernel_light_s": light, "kernel_heavy_s": heavy,
            "heavy_share": heavy / (light + heavy) if light + heavy else 0.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=200_000, help="total events (default 200k)")
    p.add_argument("--chunksize", type=int, default=50_000, help="events per chunk")
    p.add_argument("--repeat", type=int, default=2, help="timed passes after the warm-up")
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(),
                                                      "diffcoffea-bench-multiplicity"))
    args = p.parse_args(argv)

    import jax

    from analysis.driver.runner import Evaluator
    from analysis.pipeline.plan import initial_widths
    t0 = time.perf_counter()
    config = make_config(Path(args.data_dir) / str(args.events), args.events, args.chunksize)
    with Evaluator(config, cache=False) as ev:
        t_setup = time.perf_counter() - t0
        hard = plain_processor(config)
        plain_warm, plain, plain_cpu = best_of(lambda: ev.process(hard, lambda: None),
                                               args.repeat)
        reader = read_processor()
        _, read, read_cpu = best_of(lambda: ev.process(reader, lambda: None), args.repeat)
        grad_warm, grad, grad_cpu = best_of(lambda: ev.run(order=1), args.repeat)
        # the floor: the same pass filling the same histogram at width 0 (hard cuts, no
        # enumeration, no derivatives) on the numba kernel
        zero = [0.0] * len(initial_widths(config))
        floor_warm, floor, floor_cpu = best_of(lambda: ev.run(order=0, widths=zero),
                                               args.repeat)
        states = ev.run(order=1)
        share = heavy_share(ev, config, args.repeat)
        split = kernel_split(ev, config, args.repeat)
        n_chunks = len(ev.chunks)
    enum = {k: s.enumeration for k, s in states.items()}
    load = os.getloadavg()[0]
    result = {
        "events": args.events, "mean_jets": MEAN_JETS, "chunks": n_chunks,
        "chunksize": args.chunksize, "jax": jax.__version__, "cores": os.cpu_count(),
        "load_average": load, "setup_s": t_setup,
        "plain": {"warm_s": plain_warm, "best_s": plain, "cpu_s": plain_cpu},
        "gradient": {"warm_s": grad_warm, "best_s": grad, "cpu_s": grad_cpu},
        "floor": {"warm_s": floor_warm, "best_s": floor, "cpu_s": floor_cpu},
        "ratio": grad / plain, "ratio_cpu": grad_cpu / plain_cpu, "goal": GOAL,
        "floor_ratio": floor / plain, "gradient_over_floor": grad / floor,
        "enumeration": enum, **share, **split, "read_s": read, "read_cpu_s": read_cpu,
        # reading the columns (as the plain pass does) plus the event-sum kernel alone:
        # what the exact pass would cost with no overlap of reading and computing
        "exact_floor_ratio": (read + split["event_sum_kernel_s"]) / plain,
        "exact_floor_ratio_cpu": (read_cpu + split["event_sum_kernel_cpu_s"]) / plain_cpu,
    }
    print(f"{args.events} events (Poisson({MEAN_JETS}) jets), {n_chunks} chunks of <= "
          f"{args.chunksize}, iterative; jax {jax.__version__}, {os.cpu_count()} cores, load "
          f"average {load:.1f}; setup {t_setup:.1f} s")
    print(f"| {'pass':<46} | {'warm-up [s]':>11} | {'best [s]':>8} | {'CPU [s]':>7} |")
    print(f"| {'plain coffea + hist (hard cuts, HT)':<46} | {plain_warm:11.2f} | {plain:8.2f} "
          f"| {plain_cpu:7.2f} |")
    print(f"| {'diffcoffea gradient pass (HT templates + J)':<46} | {grad_warm:11.2f} | "
          f"{grad:8.2f} | {grad_cpu:7.2f} |")
    print(f"| {'floor: the same pass at width 0 (hard cuts)':<46} | {floor_warm:11.2f} | "
          f"{floor:8.2f} | {floor_cpu:7.2f} |")
    print(f"ratio {grad / plain:.2f}x wall, {grad_cpu / plain_cpu:.2f}x CPU (goal <= {GOAL}x); "
          f"floor {floor / plain:.2f}x the plain pass, gradient pass {grad / floor:.2f}x the floor")
    print(f"events with > 12 uncertain jets: {share['heavy_events']} of {share['events']} "
          f"(largest {share['largest_uncertain']}); their share of the kernel time "
          f"{share['heavy_share']:.1%} ({share['kernel_heavy_s']:.2f} s of "
          f"{share['kernel_light_s'] + share['kernel_heavy_s']:.2f} s)")
    print(f"reading alone {read:.2f} s ({read / plain:.2f}x the plain pass, CPU "
          f"{read_cpu / plain_cpu:.2f}x); the numba computation on in-memory columns "
          f"{split['kernel_s']:.2f} s (CPU {split['kernel_cpu_s']:.2f} s), of which the "
          f"event-sum kernel {split['event_sum_kernel_s']:.2f} s (CPU "
          f"{split['event_sum_kernel_cpu_s']:.2f} s); reading + that kernel: "
          f"{result['exact_floor_ratio']:.2f}x the plain pass (CPU "
          f"{result['exact_floor_ratio_cpu']:.2f}x)")
    sys.path.insert(0, str(ROOT))
    from benchmarks.results_table import command_line, record

    record("multiplicity.pass", compares="HT-histogram likelihood gradient pass, Poisson(5.5) "
           "jets / plain coffea + hist pass", figure=grad / plain, goal=f"<= {GOAL}x",
           met=grad / plain <= GOAL, command=command_line(__file__, argv),
           details=json.loads(json.dumps(result, default=str)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
