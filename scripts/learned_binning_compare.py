"""Held-out hard-binned Z of a trained learned binning against its alternatives.

Usage (after ``diffcoffea optimize configs/learned_binning.yaml --output OUT``)::

    PYTHONPATH=$PWD python scripts/learned_binning_compare.py configs/learned_binning.yaml OUT [PART]

Prints the expected discovery significance of the hard-cut, hard-binned model (every
width 0) on the held-out events (``optimizer.validation.fraction``; PART ``train`` or ``all``:
those events instead) for: the trained
network and edges (OUT/results.json's ``final.hard.parameters``), the same network with
uniform bins (the configured edges), the untrained network with the configured edges,
and the untrained network with the trained cut only. One values-only pass each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from analysis.config.loader import load_config
from analysis.driver.runner import Evaluator
from analysis.optimize.lksection import likelihood_section


def hard_z(ev: Evaluator, params: dict[str, float]) -> float:
    """Z of the hard model at ``params`` on the evaluator's events."""
    states = ev.run(params, widths=np.zeros(ev.plan.n_widths), order=0)
    return float(likelihood_section(ev.config, ev.plan, states)["significance"]["value"])


def main(config_path: str, outdir: str, part: str = "held_out") -> None:
    config = load_config(config_path)
    trained = json.loads((Path(outdir) / "results.json").read_text())["final"]["hard"]
    trained = trained["parameters"]
    init = config.initial_params()
    edges = {n: init[n] for h in config.histograms if h.trainable_edges
             for n in h.edge_names()}
    cuts = {n: trained[n] for n in config.parameters if n in trained}
    rows = {
        "trained network, trained edges": trained,
        "trained network, uniform (configured) edges": {**trained, **edges},
        "untrained network, configured edges": {},
        "untrained network, trained cuts only": cuts,
    }
    with Evaluator(config) as ev:
        if part != "all":
            ev.part = (part, float(config.optimizer.validation.fraction))
        for label, params in rows.items():
            print(f"{label}: {part} hard Z = {hard_z(ev, params):.4f}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
