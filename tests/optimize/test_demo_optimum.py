"""The demo problem end to end: gradient descent finds the best hard cut of a fine grid.

ttbar-like signal against DY-like background (generated, deterministic seeds). |eta|
is fixed; the jet pT threshold, the b-tag threshold and the (integer) minimum number
of jets are optimised with ``adam``, ``learning_rate: 0.05`` and the default
annealing, from a loose selection far from the optimum. The reference is an
independent numpy computation (uproot + sort + cumulative sums, none of our kernel
code) of the hard-cut significance on a grid of 2.5 GeV x 0.025 x every integer.

What this test does *not* claim (measured, see the report of the change): the
landscape has one local optimum per min_jets value (e.g. min_jets = 1 with a tight
b-tag, ~80 % of the best); from starts inside those basins (tight b-tag and
min_jets = 1, or min_jets = 5 with a loose b-tag) the optimiser stays there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.optimize.loop import Optimization
from tests import opt_helpers as H

pytestmark = pytest.mark.slow

EVENTS = 100_000  # per sample, 2 files each
SEEDS = {"ttbar": 1, "dy": 2}
XSEC = {"ttbar": 831.76, "dy": 6077.0}
LUMI = 10.0
SIGMA_B = 0.1
ETA_MAX = 2.4
START = {"jet_pt_min": 60.0, "btag_min": 0.0, "min_jets": 1}
STEPS = 60
BOUNDS = {"jet_pt_min": (15.0, 120.0), "btag_min": (0.0, 0.95), "min_jets": (1, 6)}
PT_GRID = np.arange(15.0, 120.0 + 1e-9, 2.5)
BTAG_GRID = np.round(np.arange(0.0, 0.95 + 1e-9, 0.025), 12)
N_MAX = 6


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("demo-optimum")


def _config(data_dir: Path):
    datasets = {
        name: {
            "generate": {
                "process": name,
                "events": EVENTS,
                "files": 2,
                "seed": SEEDS[name],
                "dir": str(data_dir / name),
            },
            "weight": "genWeight",
            "role": "signal" if name == "ttbar" else "background",
            "xsec": XSEC[name],
        }
        for name in ("ttbar", "dy")
    }
    cfg = {
        "datasets": datasets,
        "lumi": LUMI,
        "executor": {"type": "iterative", "chunksize": 200_000},
        "parameters": {
            "jet_pt_min": {"init": START["jet_pt_min"], "bounds": list(BOUNDS["jet_pt_min"])},
            "jet_abs_eta_max": {"init": ETA_MAX, "trainable": False},
            "btag_min": {"init": START["btag_min"], "bounds": list(BOUNDS["btag_min"])},
            "min_jets": {
                "init": START["min_jets"],
                "bounds": list(BOUNDS["min_jets"]),
                "integer": True,
            },
        },
        "selection": {
            "objects": {
                "collection": "Jet",
                "cuts": [
                    {"var": "pt", "op": ">", "param": "jet_pt_min", "width": 5.0},
                    {"var": "abs_eta", "op": "<", "param": "jet_abs_eta_max"},
                    {"var": "btagDeepFlavB", "op": ">", "param": "btag_min", "width": 0.05},
                ],
            },
            "events": [{"count": "Jet", "op": ">=", "param": "min_jets"}],
        },
        "objective": {"terms": [{"type": "significance", "sigma_b": SIGMA_B}]},
        "optimizer": {"name": "adam", "learning_rate": 0.05, "steps": STEPS},
    }
    return config_from_dict(cfg, source="<demo-optimum>", base_dir=data_dir)


class Reference:
    """Hard-cut significance from the ROOT files with numpy only.

    The objective's definition: Asimov Z with background variance
    ``(sigma_b b)^2 + norm^2 sum(w^2) + (norm sumw / events)^2`` (MC statistics of the
    selected events, plus the variance of one average simulated event).
    """

    def __init__(self, files: dict[str, list[Path]]) -> None:
        self.jets = {name: H.read_jets(paths) for name, paths in files.items()}

    def z(self, pts, btags) -> np.ndarray:
        """Z on the grid ``pts x btags x (min_jets = 1..N_MAX)``; NaN where b = 0."""
        sums = {n: H.hard_cut_sums(j, ETA_MAX, pts, btags, N_MAX) for n, j in self.jets.items()}
        norm = {n: XSEC[n] * LUMI / sums[n][2] for n in sums}
        s = norm["ttbar"] * sums["ttbar"][0]
        b = norm["dy"] * sums["dy"][0]
        floor = (norm["dy"] * sums["dy"][2] / len(self.jets["dy"]["weight"])) ** 2
        var = (SIGMA_B * b) ** 2 + norm["dy"] ** 2 * sums["dy"][1] + floor
        return np.where(b > 0, H.asimov_numpy(s, np.where(b > 0, b, 1.0), var), np.nan)

    def at(self, params: dict[str, float]) -> float:
        n = int(round(params["min_jets"]))
        return float(self.z([params["jet_pt_min"]], [params["btag_min"]])[0, 0, n - 1])


def test_adam_reaches_the_best_hard_cut_of_a_fine_grid(demo_dir, capsys):
    cfg = _config(demo_dir)
    ev = Evaluator(cfg)  # generates the samples on first use
    ref = Reference({n: sorted((demo_dir / n).glob("*.root")) for n in ("ttbar", "dy")})
    grid = ref.z(PT_GRID, BTAG_GRID)
    best = np.unravel_index(np.nanargmax(grid), grid.shape)
    z_best = float(grid[best])
    best_params = {
        "jet_pt_min": float(PT_GRID[best[0]]),
        "btag_min": float(BTAG_GRID[best[1]]),
        "min_jets": int(best[2]) + 1,
    }

    # The start is far from the optimum, and poor.
    z_start = ref.at(START)
    assert z_start < 0.2 * z_best
    assert START["min_jets"] != best_params["min_jets"]
    assert abs(START["btag_min"] - best_params["btag_min"]) > 0.2

    run = Optimization(cfg, ev, demo_dir / "run")
    while not run.done:
        run.do_step()
    final = run.final()
    hard = final["hard"]
    assert run.step <= STEPS
    assert float(hard["parameters"]["min_jets"]).is_integer()
    for name, (lo, hi) in BOUNDS.items():
        assert lo <= hard["parameters"][name] <= hi

    z_ours = ref.at(hard["parameters"])
    # Same definition of the significance in the pipeline and in the reference.
    assert hard["significance"] == pytest.approx(z_ours, rel=1e-9)
    ratio = z_ours / z_best
    with capsys.disabled():
        print(
            f"\ndemo optimum: grid best Z = {z_best:.3f} at {best_params}; start Z = {z_start:.3f}; "
            f"optimised hard Z = {z_ours:.3f} at "
            f"{ {k: round(v, 4) for k, v in hard['parameters'].items()} } after {run.step} steps "
            f"(soft Z = {final['soft']['significance']:.3f}); ratio = {ratio:.4f}"
        )
    assert ratio >= 0.98, (
        f"optimised hard Z {z_ours:.3f} is {ratio:.1%} of the grid's best {z_best:.3f}"
    )
