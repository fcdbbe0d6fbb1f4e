"""Benchmark (issue 49): no cliff in the number of parameters. A states pass with 12
trainable parameters against the same pass with 4, side by side in one process.

Run from the repository root:

    python benchmarks/bench_params.py                          # 400k events, 200k-event chunks
    python benchmarks/bench_params.py --events 40000 --chunksize 20000   # reduced

Data (seeded, in memory): ``--events`` generated ttbar events
(:func:`analysis.data.generate.generate_events`, Poisson(6) jets per event), cut into
chunks of ``--chunksize``. Config: four object sets of jets (``jets``; ``bjets``,
``central`` and ``forward`` derived from them), ``>= N`` jets, ``>= 1`` b-jet, ``<= 2``
forward jets and a MET cut, the jets' pT moments and HT. The 12-parameter pass makes
every cut threshold trainable; the 4-parameter pass holds 8 of them at the same values
(the same selection, the same states: only the Jacobian's columns differ).

Both passes run on the ``auto`` backend (which one is printed: numba, in blocks of
tangents past 7 parameters, :mod:`analysis.pipeline.backends.numba.blocks`), prepared
once and run on every chunk's in-memory columns, best of ``--repeat`` after a warm-up;
the wall and CPU times, their ratio and the process's peak memory (``ru_maxrss``) are
printed. Writes ``benchmarks/results/params.twelve_vs_four.json``. Goal (issue 49):
the 12-parameter pass <= 3x the 4-parameter pass, peak memory <= 3 GB at 200k-event
chunks.

Reverse mode (``--case reverse``, run by default too): two object sets (jets; b-jets
derived from them) with a learned jet score in the jets' cuts (a 4-16-4-1 tanh MLP of
pT, |eta|, b-tag and mass: 153 weights) beside six cut and count thresholds (159
trainable parameters); a reverse-mode step (the yields' gradients in one pass, what
``optimize`` runs per step for a significance objective,
:mod:`analysis.pipeline.backends.numba.fastreverse`) against a value pass of the same plan,
both under ``auto``. Writes ``benchmarks/results/params.reverse_vs_values.json``. Goal
(issue 49): the step <= 4x the value pass.

Reverse mode reading observables (``--case reverse-observables``):
the same plan with HT (``sum(jets.pt)``) and the leading jet's pT (``jets[0].pt``); the
second pass of a reverse-mode step whose objective reads their moments and the yields
(a pullback payload), on the numba sweep and on the JAX sweep (``numba_reverse=False``,
once), against a value pass of the plan (not run by default: the JAX sweep). Writes
``benchmarks/results/params.reverse_observables_vs_values.json``.

Reverse mode with histograms (``--case reverse-hists``, not run by default): the same
plan with a soft histogram of the jets' pT with trainable edges, one of the b-jets' pT
and one of MET, the first a likelihood channel's template with a shift of the jets' pT
(the whole selection again per side) and a weight variation; a payload with random
cotangents of every state (what a binned likelihood's gradient reads). The numba
pullback (:mod:`analysis.pipeline.backends.numba._fastrevhist`) against the JAX sweep
(:mod:`analysis.pipeline.backends.jax.reverse`) and a value pass of the same plan on
numba, printed only (no record): run it at a small size, e.g. ``--events 20000
--chunksize 10000``. ``--case reverse-hists-obs``: the same with HT (``sum(jets.pt)``) and the leading
jet's pT (``jets[0].pt``, in a region) as two more channels' templates
(:mod:`analysis.pipeline.backends.numba._revhistlead`,
:mod:`analysis.pipeline.backends.numba._revhistsums`); the numba pullback / value pass
is recorded as ``params.reverse_hists_obs_vs_values`` (goal, issue 49: <= 4x). ``--no-jax``
leaves the JAX sweep out of both (minutes and GBs of memory at 4,000 events), e.g.
``--case reverse-hists-obs --events 20000 --chunksize 10000 --no-jax``. ``--case
reverse-hists-mjj``: the same with the dijet mass ``mass(jets[0] + jets[1])`` as a
channel's template in a region (at least two b-jets) and as an observable (candidate
tuples: :mod:`analysis.pipeline.backends.numba._histmulti`), printed only. ``--case
reverse-hists-soft``: the same with HT in soft bins (width 20 GeV) with trainable edges as
a channel's template (the event sums' backward sweep with soft-bin weights,
:mod:`analysis.pipeline.backends.numba.kernels._numba_esum_adj`), recorded as
``params.reverse_hists_soft_vs_values`` (goal, issue 49: <= 4x), e.g. ``--case
reverse-hists-soft --no-jax``.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_pass import best_of  # noqa: E402  (the shared timing helper)

GOAL = 3.0
GOAL_GB = 3.0
GOAL_REVERSE = 4.0

#: name -> (init, lower, upper); the 4-parameter pass trains the first four
PARAMS = {
    "jet_pt": (30.0, 25.0, 60.0), "btag_min": (0.5, 0.1, 0.9), "min_jets": (4, 2, 6),
    "met_min": (30.0, 0.0, 80.0),
    "jet_eta": (2.4, 1.5, 3.0), "jet_mass": (40.0, 10.0, 80.0), "central_eta": (1.5, 0.8, 2.0),
    "central_pt": (40.0, 25.0, 80.0), "fwd_eta": (1.8, 1.2, 2.4), "fwd_pt": (35.0, 25.0, 60.0),
    "min_b": (1, 0, 3), "max_fwd": (2, 0, 4),
}


def make_config(trainable: int) -> dict:
    """The four-set selection with the first ``trainable`` of :data:`PARAMS` trainable."""
    names = list(PARAMS)
    params = {n: {"init": i, "bounds": [lo, hi], "trainable": k < trainable}
              for k, (n, (i, lo, hi)) in enumerate(PARAMS.items())}
    assert len(names) == 12

    def cut(var, op, name, width):
        return {"var": var, "op": op, "param": name, "width": width}

    return {
        "datasets": {"ttbar": {"files": ["unused.root"], "weight": "genWeight"}},
        "parameters": params,
        "objects": {
            "jets": {"collection": "Jet", "cuts": [
                cut("pt", ">", "jet_pt", 3.0), cut("abs_eta", "<", "jet_eta", 0.1),
                cut("mass", "<", "jet_mass", 3.0)]},
            "bjets": {"from": "jets", "cuts": [cut("btagDeepFlavB", ">", "btag_min", 0.03)]},
            "central": {"from": "jets", "cuts": [cut("abs_eta", "<", "central_eta", 0.1),
                                                 cut("pt", ">", "central_pt", 3.0)]},
            "forward": {"from": "jets", "cuts": [cut("abs_eta", ">", "fwd_eta", 0.1),
                                                 cut("pt", ">", "fwd_pt", 3.0)]},
        },
        "selection": [
            {"count": "jets", "op": ">=", "param": "min_jets", "width": 0.5},
            {"count": "bjets", "op": ">=", "param": "min_b", "width": 0.5},
            {"count": "forward", "op": "<=", "param": "max_fwd", "width": 0.5},
            {"var": "MET.pt", "op": ">", "param": "met_min", "width": 5.0},
        ],
        "observables": [
            {"name": "jet_pt", "x": "jets.pt", "stats": ["mean", "std"]},
            {"name": "central_pt", "x": "central.pt", "stats": ["mean"]},
            {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
        ],
    }


def reverse_config() -> dict:
    """Two object sets (jets, b-jets from them), a learned jet score in the jets' cuts:
    159 trainable parameters (module docstring); :func:`make_config`'s selection without
    the central and forward jets."""
    cfg = make_config(len(PARAMS))
    keep = ("jet_pt", "btag_min", "min_jets", "met_min", "min_b")
    cfg["parameters"] = {n: {**p, "trainable": True} for n, p in cfg["parameters"].items()
                         if n in keep}
    cfg["parameters"]["tag_min"] = {"init": 0.0, "bounds": [-3.0, 3.0]}
    cfg["scores"] = [{"score": "tag", "mlp": {
        "inputs": ["jets.pt", "abs(jets.eta)", "jets.btagDeepFlavB", "jets.mass"],
        "hidden": [16, 4], "activation": "tanh"}, "init": {"seed": 1},
        "standardise": {"mean": [50.0, 1.2, 0.3, 10.0], "std": [40.0, 0.8, 0.3, 8.0]}}]
    jets = cfg["objects"]["jets"]
    jets["cuts"] = [jets["cuts"][0], {"var": "score.tag", "op": ">", "param": "tag_min",
                                      "width": 0.2}]
    cfg["objects"] = {"jets": jets, "bjets": cfg["objects"]["bjets"]}
    cfg["selection"] = [s for s in cfg["selection"] if s.get("count") != "forward"]
    cfg["observables"] = [cfg["observables"][0],
                          {"name": "bjet_pt", "x": "bjets.pt", "stats": ["mean"]}]
    return cfg


def hists_config() -> dict:
    """:func:`reverse_config` with histograms read by a likelihood (module docstring)."""
    cfg = reverse_config()
    one = cfg["datasets"]["ttbar"]
    cfg["datasets"] = {"ttbar": {**one, "role": "signal"}, "bkg": {**one, "role": "background"}}
    cfg["histograms"] = [
        {"name": "jpt", "x": "jets.pt", "bins": {"n": 8, "lo": 20.0, "hi": 260.0},
         "width": 10.0, "trainable_edges": True},
        {"name": "bpt", "x": "bjets.pt", "edges": [20.0, 50.0, 100.0, 200.0, 400.0]},
        {"name": "met", "x": "MET.pt", "edges": [0.0, 30.0, 60.0, 100.0, 200.0]}]
    cfg["systematics"] = [
        {"name": "jes", "type": "shift", "field": "Jet.pt", "up": 1.03, "down": 0.97},
        {"name": "w", "type": "weight", "up": "MET.pt / 40", "down": "2 - MET.pt / 80"}]
    cfg["likelihood"] = {"channels": {"sr": {"histogram": "jpt"}}}
    cfg["objective"] = {"terms": [{"type": "discovery_significance"}]}
    return cfg


def obs_hists_config() -> dict:
    """:func:`hists_config` with HT (``sum(jets.pt)``) as a second channel's template and
    the leading jet's pT (``jets[0].pt``) as a third's, in a region (at least two b-jets)."""
    cfg = hists_config()
    cfg["histograms"] += [
        {"name": "ht", "x": "sum(jets.pt)", "edges": [100.0, 200.0, 300.0, 500.0, 800.0]},
        {"name": "j0", "x": "jets[0].pt", "edges": [20.0, 50.0, 80.0, 120.0, 200.0, 400.0]}]
    cfg["likelihood"]["channels"]["ht"] = {"histogram": "ht"}
    cfg["likelihood"]["channels"]["lead"] = {"histogram": "j0", "selection": [
        {"count": "bjets", "op": ">=", "value": 2}]}
    return cfg


def mjj_hists_config() -> dict:
    """:func:`hists_config` with the dijet mass as a channel's template in a region (at
    least two b-jets) and as an observable."""
    cfg = hists_config()
    cfg["histograms"].append({"name": "mjj", "x": "mass(jets[0] + jets[1])",
                              "edges": [0.0, 60.0, 120.0, 200.0, 350.0, 600.0]})
    cfg["likelihood"]["channels"]["mass"] = {"histogram": "mjj", "selection": [
        {"count": "bjets", "op": ">=", "value": 2}]}
    cfg["observables"].append({"name": "mjj", "x": "mass(jets[0] + jets[1])",
                               "stats": ["mean", "std"]})
    return cfg


def soft_hists_config() -> dict:
    """:func:`hists_config` with HT (``sum(jets.pt)``) in soft bins with trainable edges
    as a second channel's template."""
    cfg = hists_config()
    cfg["histograms"].append({"name": "ht", "x": "sum(jets.pt)", "width": 20.0,
                              "bins": {"n": 6, "lo": 100.0, "hi": 700.0},
                              "trainable_edges": True})
    cfg["likelihood"]["channels"]["ht"] = {"histogram": "ht"}
    return cfg


def observables_config() -> dict:
    """:func:`reverse_config` with HT (``sum(jets.pt)``, an event sum) and the leading
    jet's pT (``jets[0].pt``, an indexed observable) among its observables."""
    cfg = reverse_config()
    cfg["observables"] += [{"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
                           {"name": "j0", "x": "jets[0].pt", "stats": ["mean", "std"]}]
    return cfg


def observables_payload(plan) -> list:
    """A pullback payload that reads the yields, HT's and the leading jet pT's moments
    (anchors near their means; what targets on ``ht.mean``, ``j0.std`` give)."""
    from analysis.pipeline import scorecols
    from analysis.pipeline.results import YIELDS, state_names

    out: list = []
    for name in state_names(scorecols.bare(plan)):
        anchor = {"observables.ht.moments": 400.0, "observables.j0.moments": 100.0}.get(name)
        if name in YIELDS:
            out.append((None, np.float64(1.0 if name == YIELDS[0] else -0.01)))
        elif anchor is not None:
            out.append((np.float64(anchor), tuple(np.float64(0.5**r / anchor**r)
                                                  for r in range(5))))
        else:
            out.append(None)
    return out


def chunks(events: int, chunksize: int, seed: int = 49) -> list:
    """``events`` generated ttbar events as in-memory chunk columns of ``chunksize``."""
    import awkward as ak

    from analysis.data.generate import generate_events
    from analysis.pipeline.layout import ChunkColumns

    out = []
    for i, start in enumerate(range(0, events, chunksize)):
        n = min(chunksize, events - start)
        ev = generate_events("ttbar", n, seed=seed + i, mean_jets=6.0)
        jet = ev["Jet"]
        flat = {f: np.asarray(ak.flatten(jet[f]), np.float64)
                for f in ("pt", "eta", "phi", "mass", "btagDeepFlavB")}
        out.append(ChunkColumns(n, np.asarray(ev["genWeight"], np.float64),
                                {"MET.pt": np.asarray(ev["MET_pt"], np.float64)},
                                {"Jet": (np.asarray(ak.num(jet), np.int64), flat)}))
    return out


def prepared(trainable: int, order: int = 1, *, reverse: bool | None = None,
             pullback: str | None = None):
    """The pass of :func:`make_config` (``trainable`` parameters), prepared once by the
    ``auto`` chooser; returns ``(prepared, plan)``. ``reverse`` not None: the pass of
    :func:`reverse_config` instead, its yields' gradients (True) or values (False).
    ``pullback`` ``"numba"`` or ``"jax"``: :func:`observables_config`'s reverse-mode
    step (pass 2, :func:`observables_payload`) on that backend's sweep, ``"values"`` its
    value pass."""
    from analysis.config.loader import config_from_dict
    from analysis.pipeline.backend import Backend
    from analysis.pipeline.plan import build_plan, initial_widths
    from analysis.pipeline.request import Request

    data = (make_config(trainable) if reverse is None and pullback is None else
            reverse_config() if pullback is None else observables_config())
    config = config_from_dict(data, source="bench_params")
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names], np.float64)
    rows = {"yield_rows": (True, True)} if reverse else {}
    if pullback in ("numba", "jax"):
        rows = {"pullback": observables_payload(plan)}
    request = Request(theta, np.array(initial_widths(config)), order=order, **rows)
    backend = Backend(numba_reverse=False) if pullback == "jax" else Backend()
    return backend.chooser.prepare(plan, request), plan


def peak_gb() -> float:
    """This process's peak resident memory so far (``ru_maxrss``: KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _time(cols: list, cases) -> dict:
    """Each ``(label, prepared, plan)`` of ``cases`` over every chunk, best of
    ``repeat`` after a warm-up (printed)."""
    rows = {}
    for label, (prep, plan), repeat in cases:

        def run(prep=prep):
            for c in cols:
                prep.run(c)

        warm, wall, cpu = best_of(run, repeat)
        rows[label] = {"wall_s": wall, "cpu_s": cpu, "warm_s": warm, "peak_gb": peak_gb(),
                       "backend": prep.engine.name, "trainable": len(plan.trainable)}
        print(f"  {label:>16}: {wall:7.3f} s wall, {cpu:7.3f} s CPU (first {warm:.2f} s) on "
              f"{prep.engine.name}; {len(plan.trainable)} trainable; peak memory so far "
              f"{rows[label]['peak_gb']:.2f} GB")
    return rows


def _params(cols: list, args, argv) -> dict:
    """The 12- against the 4-parameter pass (module docstring), recorded."""
    rows = _time(cols, [(label, prepared(trainable, order), args.repeat)
                        for label, trainable, order in (("values", 4, 0),
                                                        ("4 parameters", 4, 1),
                                                        ("12 parameters", 12, 1))])
    four, twelve = rows["4 parameters"], rows["12 parameters"]
    ratio = twelve["wall_s"] / four["wall_s"]
    ratio_cpu = twelve["cpu_s"] / four["cpu_s"]
    peak = peak_gb()
    met = ratio <= GOAL and peak <= GOAL_GB and twelve["backend"] == "numba"
    print(f"ratio 12 / 4 parameters = {ratio:.2f}x wall, {ratio_cpu:.2f}x CPU "
          f"(goal <= {GOAL:g}x); peak memory {peak:.2f} GB (goal <= {GOAL_GB:g} GB); "
          f"load average {os.getloadavg()[0]:.1f}")
    out = {"ratio": ratio, "ratio_cpu": ratio_cpu, "peak_gb": peak, "rows": rows}
    if not args.no_record:
        from results_table import command_line, record

        command = command_line(__file__, argv)
        record("params.twelve_vs_four",
               compares="states pass, 12 / 4 trainable parameters (four object sets)",
               figure=ratio, goal=f"<= {GOAL:g}x, <= {GOAL_GB:g} GB", met=met, command=command,
               details={"events": args.events, "chunksize": args.chunksize,
                        "ratio_cpu": ratio_cpu, "peak_gb": peak,
                        "load": os.getloadavg()[0],
                        **{f"{k} {m}": v[m] for k, v in rows.items()
                           for m in ("wall_s", "cpu_s", "backend")}})
    return out


def _reverse(cols: list, args, argv, *, observables: bool = False) -> dict:
    """The reverse-mode step against a value pass (module docstring), recorded;
    ``observables``: the step of an objective that reads HT and the leading jet's pT,
    also against the JAX sweep (once)."""
    kind = {"pullback": "values"} if observables else {"reverse": False}
    step_kind = {"pullback": "numba"} if observables else {"reverse": True}
    label = "values (HT, j0)" if observables else "values (2 sets)"
    cases = [(label, prepared(0, 0, **kind), args.repeat),
             ("reverse step", prepared(0, 0, **step_kind), args.repeat)]
    if observables:
        cases.append(("JAX reverse", prepared(0, 0, pullback="jax"), 1))
    rows = _time(cols, cases)
    step, values = rows["reverse step"], rows[label]
    ratio = step["wall_s"] / values["wall_s"]
    extra = {"ratio_cpu": step["cpu_s"] / values["cpu_s"]}
    if observables:
        extra["jax_over_numba"] = rows["JAX reverse"]["wall_s"] / step["wall_s"]
    met = ratio <= GOAL_REVERSE and step["backend"] == "numba"
    reads = "reading HT and jets[0].pt" if observables else "yields' gradients"
    print(f"ratio reverse step{' reading HT and jets[0].pt' if observables else ''} / value "
          f"pass = {ratio:.2f}x wall, "
          f"{extra['ratio_cpu']:.2f}x CPU (goal <= {GOAL_REVERSE:g}x) at "
          f"{step['trainable']} parameters on {step['backend']}"
          + (f"; JAX sweep / numba = {extra['jax_over_numba']:.1f}x wall" if observables else "")
          + f"; load average {os.getloadavg()[0]:.1f}")
    if not args.no_record:
        from results_table import command_line, record

        record("params.reverse_observables_vs_values" if observables
               else "params.reverse_vs_values",
               compares=(f"reverse-mode step ({reads}, {step['trainable']} parameters, two "
                         "object sets and a learned score) / value pass"),
               figure=ratio, goal=f"<= {GOAL_REVERSE:g}x", met=met,
               command=command_line(__file__, argv),
               details={"events": args.events, "chunksize": args.chunksize, **extra,
                        "load": os.getloadavg()[0],
                        **{f"{k} {m}": v[m] for k, v in rows.items()
                           for m in ("wall_s", "cpu_s", "backend")}})
    return {"ratio": ratio, **extra, "rows": rows}


def _reverse_hists(cols: list, args, argv, *, obs: str = "") -> dict:
    """The numba pullback of a histogram-reading payload against the JAX sweep (unless
    ``--no-jax``) and a value pass (module docstring), printed; ``obs`` ``"obs"``: with
    HT's and the leading jet's templates (:func:`obs_hists_config`), the pullback / value
    pass recorded; ``"mjj"``: with the dijet mass's (:func:`mjj_hists_config`);
    ``"soft"``: with HT's in soft bins (:func:`soft_hists_config`)."""
    import jax

    from analysis.config.loader import config_from_dict
    from analysis.pipeline.backend import Backend
    from analysis.pipeline.plan import build_plan, initial_widths
    from analysis.pipeline.request import Request
    from analysis.stats.merge import is_state

    make = {"obs": obs_hists_config, "mjj": mjj_hists_config,
            "soft": soft_hists_config}.get(obs, hists_config)
    config = config_from_dict(make(), source="bench_params")
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names], np.float64)
    widths = np.array(initial_widths(config))
    values = Backend().chooser.prepare(plan, Request(theta, widths, order=0))
    leaves = jax.tree_util.tree_leaves(values.run(cols[0]).derived.value, is_leaf=is_state)
    rng = np.random.default_rng(0)
    payload = [None if is_state(x) else (None, rng.normal(size=np.shape(x))) for x in leaves]
    req = Request(theta, widths, order=0, pullback=payload)
    cases = [("values (hists)", (values, plan), args.repeat),
             ("numba pullback", (Backend().chooser.prepare(plan, req), plan), args.repeat)]
    if not args.no_jax:
        cases.append(("JAX pullback", (Backend("jax").chooser.prepare(plan, req), plan), 1))
    rows = _time(cols, cases)
    numba, val = rows["numba pullback"], rows["values (hists)"]
    ratio, ratio_cpu = numba["wall_s"] / val["wall_s"], numba["cpu_s"] / val["cpu_s"]
    if not args.no_jax:
        jx = rows["JAX pullback"]
        print(f"numba pullback / JAX pullback = {numba['wall_s'] / jx['wall_s']:.3f}x wall "
              f"({jx['wall_s'] / numba['wall_s']:.1f}x faster), "
              f"{numba['cpu_s'] / jx['cpu_s']:.3f}x CPU")
    print(f"numba pullback / value pass = {ratio:.2f}x wall, {ratio_cpu:.2f}x CPU (goal <= "
          f"{GOAL_REVERSE:g}x with HT's template); {numba['trainable']} parameters; "
          f"load average {os.getloadavg()[0]:.1f}")
    if obs in _RECORDED and not args.no_record:
        from results_table import command_line, record

        record(f"params.reverse_hists_{obs}_vs_values",
               compares=(f"reverse-mode pullback ({_RECORDED[obs]}, a shift, "
                         f"{numba['trainable']} parameters) / value pass"),
               figure=ratio, goal=f"<= {GOAL_REVERSE:g}x",
               met=ratio <= GOAL_REVERSE and numba["backend"] == "numba",
               command=command_line(__file__, argv),
               details={"events": args.events, "chunksize": args.chunksize,
                        "ratio_cpu": ratio_cpu, "load": os.getloadavg()[0],
                        **{f"{k} {m}": v[m] for k, v in rows.items()
                           for m in ("wall_s", "cpu_s", "backend")}})
    return rows


#: the reverse-hists cases recorded (the rest print only): what their templates are
_RECORDED = {"obs": "templates of jets' pT, HT and the leading jet's pT",
             "soft": "templates of jets' pT and of HT in soft bins with trainable edges"}


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; returns its figures (also printed and recorded)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--chunksize", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-record", action="store_true", help="print only")
    ap.add_argument("--no-jax", action="store_true",
                    help="reverse-hists cases: without the JAX sweep (minutes, GBs)")
    ap.add_argument("--case", choices=("all", "params", "reverse", "reverse-observables",
                                       "reverse-hists", "reverse-hists-obs",
                                       "reverse-hists-mjj", "reverse-hists-soft"),
                    default="all", help="12 vs 4 parameters, the reverse step vs values, "
                    "both (all), the reverse step reading HT and jets[0].pt vs values and "
                    "the JAX sweep, or a histogram-reading pullback vs the JAX sweep")
    args = ap.parse_args(argv)

    cols = chunks(args.events, args.chunksize)
    print(f"{args.events} events (ttbar, Poisson(6) jets), {len(cols)} chunks of "
          f"<= {args.chunksize}; load average {os.getloadavg()[0]:.1f}")
    out: dict = {}
    if args.case in ("all", "params"):
        out["params"] = _params(cols, args, argv)
    if args.case in ("all", "reverse"):
        out["reverse"] = _reverse(cols, args, argv)
    if args.case == "reverse-observables":  # not in "all": the JAX sweep takes minutes
        out["reverse_observables"] = _reverse(cols, args, argv, observables=True)
    if args.case.startswith("reverse-hists"):
        out["reverse_hists"] = _reverse_hists(cols, args, argv,
                                             obs=args.case[len("reverse-hists-"):])
    return out


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s in all)")
