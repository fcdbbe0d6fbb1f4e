"""The README's main job (``configs/demo.yaml``) converges within its step budget, to
at least 99 % of the best hard-cut significance of a fine grid, at a significance a
physicist expects of such a selection (a few to ten sigma, not 100).

The reference grid is computed independently with numpy (uproot + sort + cumulative
sums, :func:`tests.opt_helpers.hard_cut_sums`; none of the kernel code) on the demo's
own generated files: pT every 2.5 GeV, b-tag every 0.025, |eta| < 2.0 / 2.5 / 3.0,
N = 1..4 jets.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.config.loader import load_config
from analysis.driver.runner import Evaluator
from analysis.optimize.loop import Optimization
from tests import opt_helpers as H

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PT = np.arange(15.0, 120.0 + 1e-9, 2.5)
BTAG = np.round(np.arange(0.0, 0.95 + 1e-9, 0.025), 12)
ETAS = (2.0, 2.5, 3.0)
N_MAX = 4


def _z(cfg, jets, eta, pts, btags, n_max) -> np.ndarray:
    """Hard-cut Z_A on the grid ``pts x btags x (N = 1..n_max)`` at ``|eta| < eta``, with
    the objective's definition (see tests/optimize/test_demo_optimum.py), all events."""
    sigma_b = cfg.objective.terms[0].sigma_b
    sums = {n: H.hard_cut_sums(j, eta, pts, btags, n_max) for n, j in jets.items()}
    norm = {n: cfg.datasets[n].xsec * cfg.lumi / sums[n][2] for n in sums}
    s = norm["ttbar"] * sums["ttbar"][0]
    b = norm["dy"] * sums["dy"][0]
    floor = (norm["dy"] * sums["dy"][2] / len(jets["dy"]["weight"])) ** 2
    var = (sigma_b * b) ** 2 + norm["dy"] ** 2 * sums["dy"][1] + floor
    return np.where(b > 0, H.asimov_numpy(s, np.where(b > 0, b, 1.0), var), np.nan)


def test_demo_converges_to_the_grid_optimum(tmp_path):
    cfg = load_config(REPO / "configs" / "demo.yaml")
    with Evaluator(cfg) as ev:  # generates the samples on first use
        run = Optimization(cfg, ev, tmp_path)
        while not run.done:
            run.do_step()
        final = run.final()
    assert run.converged, f"not converged in {run.step} steps"
    assert run.step <= cfg.optimizer.steps
    files = {n: sorted((REPO / "data" / "generated" / n).glob("*.root")) for n in ("ttbar", "dy")}
    jets = {n: H.read_jets(f) for n, f in files.items()}
    z_best = max(float(np.nanmax(_z(cfg, jets, eta, PT, BTAG, N_MAX))) for eta in ETAS)
    # the final hard cuts on all events (the optimisation saw the training part only)
    p = final["hard"]["parameters"]
    n = int(p["min_jets"])
    z = float(_z(cfg, jets, p["jet_abs_eta_max"], [p["jet_pt_min"]], [p["btag_min"]], n)[0, 0, -1])
    print(f"\ndemo: hard Z {z:.4f} after {run.step} steps; grid best {z_best:.4f}; "
          f"ratio {z / z_best:.4f}")
    assert z >= 0.99 * z_best
    assert 3.0 < z < 6.0  # a few sigma, as such a selection in early data gives
