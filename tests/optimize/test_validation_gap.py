"""The validation gap of a learned score (issue 36): on a deliberately small sample the
network fits the simulation's fluctuations and the report flags it.

The small case (measured, docs/guide/optimisation.md): 2 x 150 generated events, half
held out, an MLP of (MET.pt, MET.phi, genWeight) with 64 x 64 hidden units (4,500
weights) cut at a wide width (1.0) that is not annealed, so that the cut's derivative
with respect to the weights survives (an annealed width saturates the network before it
can single out events), 150 steps. The network removes every training background event
(soft Z ~6.4 on the training part) while the held-out part keeps some (hard Z ~1.9).
On 2 x 3,000 events the same network still fits the training part: hard Z 12.7 on it,
7.1 on the held-out part, gap -6.1 sigma (measured 2026-12-03, flagged). A sample on
which this network is not flagged (the other direction the issue asks for) is larger
still and not yet part of this test.
"""

from __future__ import annotations

import json

import pytest

from analysis.cli.parser import main
from tests.conftest import write_config

pytestmark = pytest.mark.slow


def _config(tmp_path, events: int) -> dict:
    def sample(process, seed):
        return {"generate": {"process": process, "events": events, "files": 1, "seed": seed,
                             "dir": str(tmp_path / f"{process}_{events}")},
                "weight": "genWeight", "role": "signal" if process == "ttbar" else "background",
                "xsec": 831.76 if process == "ttbar" else 6077.0}

    return {
        "datasets": {"ttbar": sample("ttbar", 101), "dy": sample("dy", 102)},
        "lumi": 10.0,
        "executor": {"type": "iterative", "chunksize": 100000},
        "parameters": {"met_min": {"init": -1.0, "bounds": [-3.0, 3.0]}},
        "scores": [{"score": "met",
                    "mlp": {"inputs": ["MET.pt", "MET.phi", "genWeight"], "hidden": [64, 64],
                            "activation": "tanh"},
                    "init": {"seed": 2},
                    "standardise": {"mean": [40.0, 0.0, 1.0], "std": [30.0, 1.8, 0.1]}}],
        "objects": {"jets": {"collection": "Jet",
                             "cuts": [{"var": "pt", "op": ">", "value": 20.0, "width": 0}]}},
        "selection": [{"count": "jets", "op": ">=", "value": 2},
                      {"var": "score.met", "op": ">", "param": "met_min", "width": 1.0}],
        "objective": {"terms": [{"type": "significance", "sigma_b": 0.1}]},
        "optimizer": {"name": "adam", "learning_rate": 0.05, "score_learning_rate": 0.02,
                      "steps": 150, "anneal": {"schedule": "none"},
                      "validation": {"fraction": 0.5}},
    }


@pytest.mark.parametrize(("events", "flagged"), [(150, True), (3000, True)])
def test_small_samples_are_flagged(tmp_path, events, flagged):
    path = write_config(tmp_path / "gap.yaml", _config(tmp_path, events))
    out = tmp_path / "out"
    assert main(["optimize", str(path), "-o", str(out), "--no-plots", "--quiet"]) == 0
    v = json.loads((out / "results.json").read_text())["validation"]
    print(f"\n{events} events: {v['message']}; train {v['train']['final']}, held-out "
          f"{v['held_out']['final']}, gap_sigma {v['gap_sigma']}")
    assert v["flagged"] is flagged, v["message"]
    if flagged:
        assert "fits the simulation's fluctuations" in v["message"]
    else:
        assert v["gap_sigma"] is not None and abs(v["gap_sigma"]) <= v["threshold"]
