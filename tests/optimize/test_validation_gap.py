"""The validation gap of a learned score (issue 36): on a deliberately small sample the
network fits the simulation's fluctuations and the report flags it; on a large one it
does not.

The small case (measured, docs/guide/optimisation.md): 2 x 150 generated events, half
held out, an MLP of (MET.pt, MET.phi, genWeight) with 64 x 64 hidden units (4,500
weights) cut at a wide width (1.0) that is not annealed, so that the cut's derivative
with respect to the weights survives (an annealed width saturates the network before it
can single out events), 150 steps. The network removes every training background event
(soft Z ~6.4 on the training part) while the held-out part keeps some (hard Z ~1.9).
On 2 x 3,000 events the same network still fits the training part: hard Z 12.7 on it,
7.1 on the held-out part, gap -6.1 sigma (measured 2026-12-03, flagged).

The large case: 2 x 20,000 events, 8 hidden units (41 weights), the same cut, 30 steps.
The network learns (hard Z 1.6 -> 16.6 on the training part) and the parts agree:
gap +0.07 sigma (measured; +1.0 and +0.15 sigma with another initial seed or other
data seeds, -0.25 sigma on 2 x 40,000 events). The same network fits 2 x 10,000 events
in 40 steps (the training part emptied of DY), and 16 hidden units fit 2 x 20,000 in 60
steps: "large" is relative to the network and the steps.
"""

from __future__ import annotations

import json

import pytest

from analysis.cli.parser import main
from tests.conftest import write_config


def _config(tmp_path, events: int, hidden=(64, 64), steps: int = 150) -> dict:
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
                    "mlp": {"inputs": ["MET.pt", "MET.phi", "genWeight"], "hidden": list(hidden),
                            "activation": "tanh"},
                    "init": {"seed": 2},
                    "standardise": {"mean": [40.0, 0.0, 1.0], "std": [30.0, 1.8, 0.1]}}],
        "objects": {"jets": {"collection": "Jet",
                             "cuts": [{"var": "pt", "op": ">", "value": 20.0, "width": 0}]}},
        "selection": [{"count": "jets", "op": ">=", "value": 2},
                      {"var": "score.met", "op": ">", "param": "met_min", "width": 1.0}],
        "objective": {"terms": [{"type": "significance", "sigma_b": 0.1}]},
        "optimizer": {"name": "adam", "learning_rate": 0.05, "score_learning_rate": 0.02,
                      "steps": steps, "anneal": {"schedule": "none"},
                      "validation": {"fraction": 0.5}},
    }


# the small samples take minutes (150 steps of a 4,500-weight network); the large one
# ~11 s in a fresh process, most of it generating the events: in the default suite
@pytest.mark.parametrize(("events", "hidden", "steps", "flagged"), [
    pytest.param(150, (64, 64), 150, True, marks=pytest.mark.slow),
    pytest.param(3000, (64, 64), 150, True, marks=pytest.mark.slow),
    (20000, (8,), 30, False)])
def test_small_samples_are_flagged_large_ones_not(tmp_path, events, hidden, steps, flagged):
    path = write_config(tmp_path / "gap.yaml", _config(tmp_path, events, hidden, steps))
    out = tmp_path / "out"
    assert main(["optimize", str(path), "-o", str(out), "--no-plots", "--quiet"]) == 0
    v = json.loads((out / "results.json").read_text())["validation"]
    print(f"\n{events} events: {v['message']}; train {v['train']['final']}, held-out "
          f"{v['held_out']['final']}, gap_sigma {v['gap_sigma']}")
    assert v["flagged"] is flagged, v["message"]
    if flagged:
        assert "fits the simulation's fluctuations" in v["message"]
    else:
        assert v["gap_sigma"] is not None and abs(v["gap_sigma"]) < 2.0
        assert "agree within their MC uncertainty" in v["message"]
        # the network did learn: not agreement by standing still (Z 1.6 -> 16.7 held out)
        assert v["held_out"]["final"] < 5 * v["held_out"]["initial"] < 0
