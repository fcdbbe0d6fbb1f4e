"""Held-out hard-binned Z of a trained learned binning against its alternatives.

Usage (after ``diffcoffea optimize configs/learned_binning.yaml --output OUT``)::

    PYTHONPATH=$PWD python scripts/learned_binning_compare.py configs/learned_binning.yaml OUT \
        [--part held_out|train|all]

prints the expected discovery significance of the hard-cut, hard-binned model (every
width 0) on the held-out events (``optimizer.validation.fraction``; ``--part train`` or
``all``: those events instead) for: the trained network and edges (OUT/results.json's
``final.hard.parameters``), the same network with uniform bins (the configured edges),
the untrained network with the configured edges, and the untrained network with the
trained cut only. One values-only pass each.

The paired comparison of trained and uniform edges, with its Monte Carlo uncertainty::

    PYTHONPATH=$PWD python scripts/learned_binning_compare.py configs/learned_binning.yaml \
        --seeds 3 4 5 --tests 4 --work results/lb_compare

trains the example once per network seed (``scores[0].init.seed``; the same training
events; each run's ``DIR/seed_S/results.json`` is reused when present), then evaluates
each trained network with its trained edges and with the configured uniform edges on
the held-out events and on ``--tests`` independent samples generated like the training
ones (other seeds, ``--test-events`` events per dataset; never seen by any training).
Per run it prints ``dZ = Z(trained edges) - Z(uniform edges)`` on each sample (the same
events, network and cut: a paired difference), and their mean with its standard error
over the independent samples: the Monte Carlo uncertainty of the gain. ``--fixed-edges``
adds a column: the network trained with the same seed for the uniform edges
(``trainable_edges: false``), at those edges.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from analysis.config.loader import config_from_dict, load_config
from analysis.driver.runner import Evaluator
from analysis.optimize.lksection import likelihood_section


def hard_z(ev: Evaluator, params: dict[str, float]) -> float:
    """Z of the hard model at ``params`` on the evaluator's events."""
    states = ev.run(params, widths=np.zeros(ev.plan.n_widths), order=0)
    return float(likelihood_section(ev.config, ev.plan, states)["significance"]["value"])


def _trained(outdir: Path) -> dict[str, float]:
    return json.loads((outdir / "results.json").read_text())["final"]["hard"]["parameters"]


def _uniform(config) -> dict[str, float]:
    init = config.initial_params()
    return {n: init[n] for h in config.histograms if h.trainable_edges for n in h.edge_names()}


def table(config_path: str, outdir: str, part: str = "held_out") -> None:
    """The four rows of the module docstring's first use."""
    config = load_config(config_path)
    trained = _trained(Path(outdir))
    cuts = {n: trained[n] for n in config.parameters if n in trained}
    rows = {
        "trained network, trained edges": trained,
        "trained network, uniform (configured) edges": {**trained, **_uniform(config)},
        "untrained network, configured edges": {},
        "untrained network, trained cuts only": cuts,
    }
    with Evaluator(config) as ev:
        if part != "all":
            ev.part = (part, float(config.optimizer.validation.fraction))
        for label, params in rows.items():
            print(f"{label}: {part} hard Z = {hard_z(ev, params):.4f}")


def _raw(config_path: Path) -> dict:
    """The config's mapping with its generated files' folders made absolute."""
    raw = yaml.safe_load(config_path.read_text())
    for ds in raw["datasets"].values():
        gen = ds.get("generate")
        if gen is not None:
            gen["dir"] = str((config_path.parent / gen["dir"]).resolve())
    return raw


def _variant_for_seed(raw: dict, seed: int, work: Path, *, fixed: bool = False) -> Path:
    out = copy.deepcopy(raw)
    out["scores"][0]["init"] = {"seed": seed}
    if fixed:  # the network trained for the configured (uniform) edges
        for h in out["histograms"]:
            h["trainable_edges"] = False
    path = work / f"seed_{seed}{'_fixed' if fixed else ''}.yaml"
    path.write_text(yaml.safe_dump(out, sort_keys=False))
    return path


def _test_sample(raw: dict, k: int, events: int, work: Path):
    """The config on independent sample ``k``: every generated dataset at another seed."""
    out = copy.deepcopy(raw)
    for i, ds in enumerate(out["datasets"].values()):
        gen = ds["generate"]
        gen.update(seed=1000 + 10 * k + i, events=events, dir=str(work / f"test_{k}_{i}"))
    return config_from_dict(out, source=f"test sample {k}")


def paired(config_path: str, seeds: list[int], tests: int, events: int, work: str,
           fixed_edges: bool = False) -> None:
    """The paired comparison of the module docstring's second use; ``fixed_edges``: also
    the network trained (same seed) for the configured edges, evaluated at them."""
    work_dir = Path(work).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    raw = _raw(Path(config_path))
    runs, fixed_runs = {}, {}
    for seed in seeds:
        for fixed in (False, True) if fixed_edges else (False,):
            out = work_dir / f"seed_{seed}{'_fixed' if fixed else ''}"
            if not (out / "results.json").exists():
                cfg = _variant_for_seed(raw, seed, work_dir, fixed=fixed)
                subprocess.run(["diffcoffea", "optimize", str(cfg), "--output", str(out),
                                "--quiet", "--no-plots", "--overwrite"], check=True)
            (fixed_runs if fixed else runs)[seed] = _trained(out)
    config = config_from_dict(raw, source=config_path)
    uniform = _uniform(config)
    samples = [("held-out 30%", config, "held_out")] + [
        (f"test {k}", _test_sample(raw, k, events, work_dir), "all") for k in range(tests)]
    diffs = {seed: [] for seed in seeds}
    extra = " Z network trained for uniform edges |" if fixed_edges else ""
    print(f"| network seed | sample | Z trained edges | Z uniform edges | dZ |{extra}")
    print("|---|---|---|---|---|" + ("---|" if fixed_edges else ""))
    for label, cfg, part in samples:
        with Evaluator(cfg) as ev:
            if part != "all":
                ev.part = (part, float(cfg.optimizer.validation.fraction))
            for seed, trained in runs.items():
                zt = hard_z(ev, trained)
                zu = hard_z(ev, {**trained, **uniform})
                if part == "all":
                    diffs[seed].append(zt - zu)
                cell = ""
                if seed in fixed_runs:
                    cell = f" {hard_z(ev, {**fixed_runs[seed], **uniform}):.4f} |"
                print(f"| {seed} | {label} | {zt:.4f} | {zu:.4f} | {zt - zu:+.4f} |{cell}")
    every = [d for ds in diffs.values() for d in ds]
    for seed, ds in diffs.items():
        if len(ds) > 1:
            sem = float(np.std(ds, ddof=1)) / math.sqrt(len(ds))
            print(f"seed {seed}: mean dZ over {len(ds)} test samples {np.mean(ds):+.4f} "
                  f"+- {sem:.4f}")
    if len(every) > 1:
        sem = float(np.std(every, ddof=1)) / math.sqrt(len(every))
        print(f"all runs: mean dZ {np.mean(every):+.4f} +- {sem:.4f} ({len(every)} pairs; "
              "the runs share the test samples, so this error is a lower bound)")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("outdir", nargs="?", help="a trained run (the four-row table)")
    ap.add_argument("part", nargs="?", default=None, help="held_out (default), train or all")
    ap.add_argument("--part", dest="part_opt", default="held_out",
                    choices=("held_out", "train", "all"))
    ap.add_argument("--seeds", type=int, nargs="+", help="train one run per network seed")
    ap.add_argument("--tests", type=int, default=4, help="independent test samples")
    ap.add_argument("--test-events", type=int, default=50000, help="events per dataset")
    ap.add_argument("--work", default="results/lb_compare", help="the runs and samples")
    ap.add_argument("--fixed-edges", action="store_true",
                    help="also train each seed's network for the uniform edges (a column)")
    args = ap.parse_args(argv)
    if args.seeds:
        paired(args.config, args.seeds, args.tests, args.test_events, args.work,
               args.fixed_edges)
    elif args.outdir:
        table(args.config, args.outdir, args.part or args.part_opt)
    else:
        ap.error("give OUT (a trained run) or --seeds")


if __name__ == "__main__":
    main(sys.argv[1:])
