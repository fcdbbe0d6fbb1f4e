"""Optimisation a physicist can trust: widths and optimiser settings left to the package.

For each config (generated ttbar-like over DY-like samples of ``--events`` events, and
the real v12 ttbar over Drell-Yan files of ``../shared/data``; the counting
significance with 2, 4 and 8 trainable cuts and the binned profile likelihood's
discovery significance with 2), ``diffcoffea optimize`` runs with no ``width`` on
any cut (:mod:`analysis.driver.autowidth`), no learning rate, schedule or annealing
(the defaults), keep-best on (the default), through the command line's own entry point
in this process. Its final hard-cut significance on all events is compared with the
initial one and with the best of an independent grid scan of the hard-cut significance
written here in numpy + awkward (jets read with uproot; the objective's definition:
Asimov Z with sigma_b, the MC variance and its one-event floor), not ``diffcoffea scan``.
The 8-parameter and the likelihood configs have no grid (eight dimensions; a fit per
point): they are measured against their start. Printed and recorded
(``results_table.record``): per config the initial, final and grid Z, final / grid, the
passes over the data; goals (issue 52): >= 95 % of the grid's best on the generated
samples, never below the start on the real ones and on the configs without a grid.

    python benchmarks/bench_trust.py                     # 10^5 generated events, 60 steps
    python benchmarks/bench_trust.py --events 2000 --steps 4 --no-record   # smoke size
    python benchmarks/bench_trust.py --events 2000 --steps 4 --only generated_8p
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
# `python benchmarks/bench_trust.py` from the repository root imports this checkout.
sys.path.insert(0, str(ROOT))

from benchmarks.results_table import command_line, record  # noqa: E402
from tests.opt_helpers import asimov_numpy, hard_cut_sums, read_jets  # noqa: E402

GOAL_GENERATED = 0.95  # final / grid's best hard-cut Z, at least
SIGMA_B = 0.15
PT = np.arange(15.0, 120.0 + 1e-9, 2.5)
BTAG = np.round(np.arange(0.0, 0.95 + 1e-9, 0.025), 12)
ETAS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 4.7)
N_MAX = 6
NO_BTAG = np.array([-1e9])

PARAMS = {
    "jet_pt_min": {"init": 20.0, "bounds": [15.0, 120.0]},
    "jet_abs_eta_max": {"init": 4.0, "bounds": [1.0, 4.7]},
    "btag_min": {"init": 0.05, "bounds": [0.0, 0.95]},
    "min_jets": {"init": 2, "bounds": [1, 6], "integer": True},
}
CUTS = {
    "jet_pt_min": {"var": "pt", "op": ">", "param": "jet_pt_min"},
    "jet_abs_eta_max": {"var": "abs_eta", "op": "<", "param": "jet_abs_eta_max"},
    "btag_min": {"var": "btagDeepFlavB", "op": ">", "param": "btag_min"},
}


def _config(datasets: dict, lumi: float, names: tuple[str, ...], steps: int | None, *,
            btag: bool = True) -> dict:
    """A config with the cuts of ``names`` trainable (the others fixed at their init),
    no widths, the optimiser's defaults; without ``btag`` no b-tag cut."""
    params = {n: {**p, "trainable": n in names} for n, p in PARAMS.items()
              if btag or n != "btag_min"}
    cfg = {
        "datasets": datasets, "lumi": lumi,
        "executor": {"type": "iterative", "chunksize": 100_000},
        "parameters": params,
        "selection": {"objects": {"collection": "Jet", "cuts": [
            c for n, c in CUTS.items() if btag or n != "btag_min"]},
                      "events": [{"count": "Jet", "op": ">=", "param": "min_jets"}]},
        "objective": {"terms": [{"type": "significance", "sigma_b": SIGMA_B}]},
    }
    if steps is not None:
        cfg["optimizer"] = {"steps": steps}
    return cfg


def _config_8p(datasets: dict, lumi: float, steps: int | None) -> dict:
    """Eight trainable cuts, no widths, the optimiser's defaults: jets' pT and |eta|,
    b-jets' b-tag and pT, the numbers of jets and of b-jets, a MET window's two ends."""
    params = {**{n: p for n, p in PARAMS.items() if n != "min_jets"},
              "bjet_pt_min": {"init": 20.0, "bounds": [15.0, 120.0]},
              "min_jets": PARAMS["min_jets"],
              "min_bjets": {"init": 1, "bounds": [0, 4], "integer": True},
              "met_lo": {"init": 1.0, "bounds": [0.0, 100.0]},
              "met_hi": {"init": 400.0, "bounds": [100.0, 500.0]}}
    jet_cuts = [CUTS["jet_pt_min"], CUTS["jet_abs_eta_max"]]
    cfg = {
        "datasets": datasets, "lumi": lumi,
        "executor": {"type": "iterative", "chunksize": 100_000},
        "parameters": params,
        "objects": {"jets": {"collection": "Jet", "cuts": jet_cuts},
                    "bjets": {"from": "jets", "cuts": [
                        CUTS["btag_min"],
                        {"var": "pt", "op": ">", "param": "bjet_pt_min"}]}},
        "selection": [{"count": "jets", "op": ">=", "param": "min_jets"},
                      {"count": "bjets", "op": ">=", "param": "min_bjets"},
                      {"var": "MET.pt", "op": "window", "lo_param": "met_lo",
                       "hi_param": "met_hi"}],
        "objective": {"terms": [{"type": "significance", "sigma_b": SIGMA_B}]},
    }
    if steps is not None:
        cfg["optimizer"] = {"steps": steps}
    return cfg


def _config_likelihood(datasets: dict, lumi: float, steps: int | None) -> dict:
    """The binned profile likelihood's discovery significance (HT of the selected jets
    in 6 bins, a 15 % lnN on the background as the counting configs' sigma_b, MC
    statistics) over two trainable cuts (jets' pT, b-jets' b-tag), no widths."""
    cfg = {
        "datasets": datasets, "lumi": lumi,
        "executor": {"type": "iterative", "chunksize": 100_000},
        "parameters": {"jet_pt_min": PARAMS["jet_pt_min"],
                       "btag_min": PARAMS["btag_min"]},
        "objects": {"jets": {"collection": "Jet", "cuts": [CUTS["jet_pt_min"]]},
                    "bjets": {"from": "jets", "cuts": [CUTS["btag_min"]]}},
        "selection": [{"count": "jets", "op": ">=", "value": 2},
                      {"count": "bjets", "op": ">=", "value": 1}],
        "histograms": [{"name": "ht", "x": "sum(jets.pt)",
                        "edges": [0, 100, 200, 300, 400, 600, 1000]}],
        "systematics": [{"name": "bkg_norm", "type": "lnN", "datasets": [
            n for n, d in datasets.items() if d["role"] == "background"],
            "kappa": 1.0 + SIGMA_B}],
        "likelihood": {"channels": {"sr": {"histogram": "ht"}}, "mc_stat": True},
        "objective": {"terms": [{"type": "discovery_significance"}]},
    }
    if steps is not None:
        cfg["optimizer"] = {"steps": steps}
    return cfg


def _grid_z(cfg: dict, jets: dict[str, dict], names: tuple[str, ...], btag: bool) -> float:
    """The best hard-cut Z_A over the grid of the trainable cuts (the others at init):
    numpy + awkward, the objective's definition (tests/optimize/test_demo_converges.py)."""
    fixed = {n: p["init"] for n, p in PARAMS.items()}
    pts = PT if "jet_pt_min" in names else np.array([fixed["jet_pt_min"]])
    btags = (BTAG if "btag_min" in names else np.array([fixed["btag_min"]])) if btag else NO_BTAG
    etas = ETAS if "jet_abs_eta_max" in names else (fixed["jet_abs_eta_max"],)
    ns = np.arange(1, N_MAX + 1) if "min_jets" in names else np.array([int(fixed["min_jets"])])
    best = -np.inf
    signal = [n for n, d in cfg["datasets"].items() if d["role"] == "signal"]
    background = [n for n, d in cfg["datasets"].items() if d["role"] == "background"]
    for eta in etas:
        sums = {n: hard_cut_sums(j, eta, pts, btags, N_MAX) for n, j in jets.items()}
        norm = {n: cfg["datasets"][n]["xsec"] * cfg["lumi"] / sums[n][2] for n in sums}
        s = sum(norm[n] * sums[n][0] for n in signal)
        b = sum(norm[n] * sums[n][0] for n in background)
        var = (SIGMA_B * b) ** 2 + sum(norm[n] ** 2 * sums[n][1] for n in background)
        var = var + sum((norm[n] * sums[n][2] / len(jets[n]["weight"])) ** 2 for n in background)
        z = np.where(b > 0, asimov_numpy(s, np.where(b > 0, b, 1.0), var), np.nan)
        z = z[:, :, ns - 1]
        if np.isfinite(z).any():
            best = max(best, float(np.nanmax(z)))
    return best


def _optimize(cfg: dict, workdir: Path, name: str) -> tuple[dict, float]:
    from analysis.cli.parser import main as cli

    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out = workdir / f"out_{name}"
    t0 = time.perf_counter()
    if cli(["optimize", str(path), "-o", str(out), "--no-plots", "--overwrite"]) != 0:
        raise RuntimeError(f"optimize {name} failed")
    return json.loads((out / "results.json").read_text()), time.perf_counter() - t0


def cases(events: int, data_dir: Path, steps: int | None) -> list[dict[str, Any]]:
    """The configs: name, kind (generated | real), config, the datasets' files, b-tag."""
    from analysis.data.generate import ensure_dataset

    half = max(events // 2, 1)
    gen = {}
    for name, process, xsec, seed in (("ttbar", "ttbar", 831.76, 1), ("dy", "dy", 6077.0, 2)):
        d = data_dir / f"{name}_{events}"
        ensure_dataset(d, process=process, n_events=half, n_files=1, seed=seed)
        gen[name] = {"files": [str(d / "*.root")], "weight": "genWeight", "xsec": xsec,
                     "role": "signal" if name == "ttbar" else "background"}
    shared = (ROOT / ".." / "shared" / "data").resolve()
    real = {"tt": {"files": [str(shared / "nano_tt_v12.root")], "weight": "genWeight",
                   "role": "signal", "xsec": 831.76},
            "dy": {"files": [str(shared / "nano_dy.root")], "weight": "genWeight",
                   "role": "background", "xsec": 6077.2}}
    # lumi: the demo's 7.5/nb scaled to the sample (a few-sigma selection, issue 35)
    out = []
    for names in (("jet_pt_min", "btag_min"), tuple(PARAMS)):
        out.append({"name": f"generated_{len(names)}p", "kind": "generated", "names": names,
                    "btag": True, "config": _config(gen, 0.0075, names, steps)})
    # no independent grid: eight dimensions (~10^9 points at the 4-parameter spacing)
    # and a profile-likelihood fit per point are beyond a numpy scan here; measured
    # against the start (never below it) and, for 8p, the 4-parameter grid's best
    out.append({"name": "generated_8p", "kind": "generated", "names": None, "btag": True,
                "config": _config_8p(gen, 0.0075, steps)})
    out.append({"name": "generated_likelihood_2p", "kind": "generated", "names": None,
                "btag": True, "config": _config_likelihood(gen, 0.0075, steps)})
    for names in (("jet_pt_min", "min_jets"), ("jet_pt_min", "jet_abs_eta_max", "min_jets")):
        cfg = _config(real, 1.0, names, steps, btag=False)  # as configs/real_optimize.yaml
        out.append({"name": f"real_{len(names)}p", "kind": "real", "names": names,
                    "btag": False, "config": cfg})
    return out


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=100_000, help="generated events (both samples)")
    p.add_argument("--steps", type=int, default=None, help="optimizer.steps (default: the package's)")
    p.add_argument("--data-dir", type=Path, default=ROOT / "data" / "generated" / "bench_trust")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="run only these configs (e.g. generated_8p); implies --no-record")
    p.add_argument("--no-record", action="store_true")
    args = p.parse_args(argv)
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(args.events, args.data_dir, args.steps):
            if args.only and case["name"] not in args.only:
                continue
            r, wall = _optimize(case["config"], Path(tmp), case["name"])
            files = {n: [f for pat in d["files"] for f in sorted(Path(pat).parent.glob(
                Path(pat).name))] for n, d in case["config"]["datasets"].items()}
            grid = None
            if case["names"] is not None:
                jets = {n: read_jets(f) for n, f in files.items()}
                grid = _grid_z(case["config"], jets, case["names"], case["btag"])
            z = r["hard_all"]["significance"]
            row = {"kind": case["kind"], "params": len(r["trainable"]),
                   "objective": case["config"]["objective"]["terms"][0]["type"],
                   "initial": z["initial"], "final": z["final"], "grid": grid,
                   "fraction": (z["final"] or 0.0) / grid if grid and grid > 0 else None,
                   "passes": r["passes"], "steps": r["steps_run"], "wall_s": wall,
                   "kept_step": r["keep_best"]["step"], "auto_widths": (
                       r.get("auto_widths") or {}).get("widths")}
            no_worse = z["final"] is not None and z["final"] >= z["initial"] - 1e-12
            row["met"] = (row["fraction"] is not None and row["fraction"] >= GOAL_GENERATED
                          if case["kind"] == "generated" and grid is not None else no_worse)
            rows[case["name"]] = row
            vs = (f"grid's best {grid:.3f}, {100 * (row['fraction'] or 0):.1f} %"
                  if grid is not None else "no grid")
            print(f"{case['name']}: Z {z['initial']:.3f} -> {z['final']:.3f} ({vs}), "
                  f"{r['steps_run']} steps, "
                  f"{r['passes']} passes, kept step {row['kept_step']}, {wall:.0f} s; "
                  f"widths {row['auto_widths']}: {'met' if row['met'] else 'NOT met'}",
                  flush=True)
    if not (args.no_record or args.only):
        command = command_line(__file__, argv)
        gen = [r for r in rows.values() if r["kind"] == "generated" and r["grid"] is not None]
        worst = min(r["fraction"] or 0.0 for r in gen)
        record("trust.generated_vs_grid", compares=(
            f"final hard-cut Z / best of a numpy grid, {args.events} generated events, "
            "widths and optimiser left to the package (worst config)"), figure=worst,
            goal=f">= {GOAL_GENERATED}x", met=worst >= GOAL_GENERATED, command=command,
            details=rows)
        real = [r for r in rows.values() if r["kind"] == "real"]
        gain = min((r["final"] or 0.0) / r["initial"] for r in real)
        ungridded = [r for r in rows.values() if r["grid"] is None]
        if ungridded:
            start = min((r["final"] or 0.0) / r["initial"] for r in ungridded)
            record("trust.ungridded_vs_start", compares=(
                f"final / initial hard-cut Z, {args.events} generated events: the "
                "8-parameter and the likelihood config (worst; no independent grid)"),
                figure=start, goal=">= 1x", met=start >= 1.0, command=command,
                details=rows)
        record("trust.real_vs_start", compares=(
            "final / initial hard-cut Z on the real v12 ttbar and DY files (worst config)"),
            figure=gain, goal=">= 1x", met=gain >= 1.0, command=command, details=rows)
    return rows


if __name__ == "__main__":
    main()
