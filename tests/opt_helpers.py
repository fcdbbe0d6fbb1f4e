"""Shared helpers of the optimisation tests (objectives, optimize, resume, scan, errors).

Every test of these files uses the same analysis *shape* (four parameters, three
soft object cuts, one count cut, one observable): the JAX kernel is compiled once
per shape and process (~10 s), so reusing one plan keeps the suite fast. Tests vary
only what is not part of the plan: parameter values, widths, objective, optimiser.

Data: a few thousand generated ttbar-like (signal) and DY-like (background) events,
written once per test session by :func:`small_data` (deterministic seeds).
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

from analysis.config.loader import Config, config_from_dict
from analysis.data.generate import ensure_dataset
from analysis.runtime.childenv import child_env

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

# Small enough for a pass in ~0.2 s, large enough that the background never runs
# out at the parameter values the tests use. 2 files x 2 chunks per dataset, so
# stochastic mode has chunks to choose from.
EVENTS = 3000
FILES = 2
CHUNKSIZE = 1000

PARAMETERS: dict[str, dict[str, Any]] = {
    "jet_pt_min": {"init": 30.0, "bounds": [15.0, 120.0]},
    "jet_abs_eta_max": {"init": 2.5, "bounds": [0.5, 4.7]},
    "btag_min": {"init": 0.2, "bounds": [0.0, 0.95]},
    "min_jets": {"init": 2, "bounds": [1, 6], "integer": True},
}
NAMES = tuple(PARAMETERS)
WIDTHS = (
    5.0,
    0.2,
    0.05,
    1.0,
)  # three object cuts, then the count cut's integer smoothing (default 1)


def small_data(tmp_path_factory) -> Path:
    """Directory with ``ttbar/`` and ``dy/`` generated datasets (the session fixture
    ``small_data`` of ``conftest.py`` calls this once; ``ensure_dataset`` keeps a
    manifest, so a second call reuses the files)."""
    base = tmp_path_factory.getbasetemp() / "opt-small-data"
    ensure_dataset(base / "ttbar", process="ttbar", n_events=EVENTS, n_files=FILES, seed=11)
    ensure_dataset(base / "dy", process="dy", n_events=EVENTS, n_files=FILES, seed=12)
    return base


def config_dict(data: Path, **sections: Any) -> dict[str, Any]:
    """The common config as a plain dict; ``sections`` replace or update top-level keys.

    A dict value is merged one level deep into the default (so ``optimizer={"steps": 3}``
    keeps the default learning rate); any other value replaces the key.
    """
    cfg: dict[str, Any] = {
        "datasets": {
            "ttbar": {
                "files": [str(data / "ttbar" / "*.root")],
                "weight": "genWeight",
                "role": "signal",
                "xsec": 831.76,
            },
            "dy": {
                "files": [str(data / "dy" / "*.root")],
                "weight": "genWeight",
                "role": "background",
                "xsec": 6077.0,
            },
        },
        "lumi": 10.0,
        "executor": {"type": "iterative", "chunksize": CHUNKSIZE},
        "parameters": copy.deepcopy(PARAMETERS),
        "selection": {
            "objects": {
                "collection": "Jet",
                "cuts": [
                    {"var": "pt", "op": ">", "param": "jet_pt_min", "width": WIDTHS[0]},
                    {"var": "abs_eta", "op": "<", "param": "jet_abs_eta_max", "width": WIDTHS[1]},
                    {"var": "btagDeepFlavB", "op": ">", "param": "btag_min", "width": WIDTHS[2]},
                ],
            },
            "events": [{"count": "Jet", "op": ">=", "param": "min_jets"}],
        },
        "observables": [{"name": "jet_pt", "x": "Jet.pt", "stats": ["mean", "std"]}],
        "objective": {"terms": [{"type": "significance", "sigma_b": 0.1}]},
        "optimizer": {"name": "adam", "learning_rate": 0.05, "steps": 6},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **copy.deepcopy(value)}
        else:
            cfg[key] = copy.deepcopy(value)
    return cfg


def make_config(data: Path, **sections: Any) -> Config:
    """Validated :class:`Config` of :func:`config_dict`."""
    return config_from_dict(config_dict(data, **sections), source="<test>", base_dir=data)


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for ``python -m analysis`` in a subprocess: the repo importable."""
    return child_env(**(extra or {}))


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "analysis", *args]


def run_cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None):
    """Run the command line in a subprocess; returns the CompletedProcess (text output)."""
    return subprocess.run(
        cli_command(*args),
        cwd=REPO,
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def comparable_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """History entries without their wall times (which differ between runs) and their
    hard-cut values (``hard``, ``hard_held_out``: evaluated after the loop, so in
    results.json only, not in the checkpoint); widths as a list in cut order
    (results.json keys them by cut, the checkpoint lists them)."""

    def widths(w: Any) -> Any:
        return list(w.values()) if isinstance(w, dict) else w

    return [
        {k: widths(v) if k == "widths" else v for k, v in entry.items()
         if k not in ("wall_time_s", "hard", "hard_held_out")}
        for entry in history
    ]


# --- an independent hard-cut reference (numpy + uproot, none of our kernel code) ----------


def read_jets(files: list[Path] | list[str]) -> dict[str, Any]:
    """Jet pT, |eta|, b-tag (awkward, float64) and event weights (numpy float64) of ROOT files."""
    import awkward as ak
    import numpy as np
    import uproot

    parts = []
    for path in sorted(str(f) for f in files):
        with uproot.open(path) as f:
            parts.append(
                f["Events"].arrays(["Jet_pt", "Jet_eta", "Jet_btagDeepFlavB", "genWeight"])
            )
    a = ak.concatenate(parts)
    return {
        "pt": ak.values_astype(a.Jet_pt, np.float64),
        "abs_eta": abs(ak.values_astype(a.Jet_eta, np.float64)),
        "btag": ak.values_astype(a.Jet_btagDeepFlavB, np.float64),
        "weight": ak.to_numpy(a.genWeight).astype(np.float64),
    }


def hard_cut_sums(jets: dict[str, Any], eta_max: float, pts, btags, n_max: int):
    """Selected sum of weights and of squared weights for every hard cut on a grid.

    The selection is: jets with ``pt > P``, ``|eta| < eta_max``, ``btag > B``; events
    with at least ``N`` such jets. Returns arrays ``(len(pts), len(btags), n_max)`` for
    ``N = 1..n_max``, and the total sum of weights.

    For each ``B``, the ``N``-th hardest jet passing the eta and b-tag cuts has pT
    ``p_N``; the event passes ``(P, B, N)`` iff ``p_N > P``, so one sort per ``(B, N)``
    and a cumulative sum give every ``P`` at once.
    """
    import awkward as ak
    import numpy as np

    pts = np.asarray(pts, dtype=np.float64)
    w = jets["weight"]
    sumw = np.zeros((len(pts), len(btags), n_max))
    sumw2 = np.zeros_like(sumw)
    for j, b in enumerate(btags):
        passing = jets["pt"][(jets["abs_eta"] < eta_max) & (jets["btag"] > b)]
        hardest = ak.sort(passing, axis=1, ascending=False)
        padded = ak.fill_none(ak.pad_none(hardest, n_max, clip=True), -np.inf)
        nth = ak.to_numpy(padded).astype(np.float64)  # (events, n_max)
        for n in range(n_max):
            order = np.argsort(nth[:, n], kind="stable")
            values, ws = nth[order, n], w[order]
            cw = np.concatenate([[0.0], np.cumsum(ws)])
            cw2 = np.concatenate([[0.0], np.cumsum(ws * ws)])
            k = np.searchsorted(values, pts, side="right")  # events with p_N <= P fail
            sumw[:, j, n] = cw[-1] - cw[k]
            sumw2[:, j, n] = cw2[-1] - cw2[k]
    return sumw, sumw2, float(w.sum())


def asimov_numpy(s, b, var):
    """Asimov significance from the profile likelihood ratio, numpy, elementwise.

    Written from the likelihood ``Pois(n | s + b') Pois(m | tau b')`` with Asimov data
    ``n = s + b``, ``m = tau b``, ``tau = b / var``: the conditional estimate at zero
    signal is ``b'' = (n + m) / (1 + tau)`` and ``Z^2 = -2 ln lambda(0)``. ``var = 0``
    is the known-background limit ``2 ((s + b) ln(1 + s / b) - s)``.
    """
    import numpy as np

    s, b, var = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (s, b, var)))
    with np.errstate(divide="ignore", invalid="ignore"):
        n = s + b
        z0 = 2.0 * (n * np.log(n / b) - s)
        tau = b / var
        m = tau * b
        bb = (n + m) / (1.0 + tau)
        zv = 2.0 * (n * np.log(n / bb) + bb - n + m * np.log(m / (tau * bb)) + tau * bb - m)
        z2 = np.where(var > 0, zv, z0)
    return np.sqrt(np.maximum(z2, 0.0))
