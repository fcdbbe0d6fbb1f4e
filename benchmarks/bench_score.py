"""Benchmark: one YAML-pipeline gradient step with a learned score (16-16-1 MLP + 4 cuts,
reverse mode) against a value-only pass and against the 4-parameter step (issue 18).

Run from the repository root:

    python benchmarks/bench_score.py [--events 20000] [--chunksize 20000] [--repeat 3]

Data: the demo generator (``analysis.data.generate``, ttbar and DY, ``--events`` each,
written once under ``data/generated/bench_score_*``), read through the Evaluator with
its column cache, so every timed pass reads cached columns. Configs (object-set form):
jets ``pt > t0``, ``|eta| < t1``, ``score.tag > t2`` with ``tag`` a 4-16-16-1 tanh MLP of
(pt, |eta|, btag, mass) per jet, and ``MET.pt > t3``: 4 cuts + 369 weights = 373
trainable parameters; the 4-parameter config has the same cuts with ``btag > t2``
instead of the score. Timed (best of ``--repeat``, all in turns, after a warm-up that compiles):

- value-only pass: ``Evaluator.run(order=0)`` of the score config;
- score step: :func:`analysis.optimize.reverse.reverse_objective`, what ``optimize``
  runs per step: on the numba kernel one pass with the yields' gradients when the
  objective reads the yields only (the significance objective; from the second step on
  only the rows its cotangent reads), else (a target on ``ttbar.ht.mean`` added: the
  observable's moments are read) values, then the pullback pass (the JAX sweep for the
  dataset whose observable is read); on the JAX kernel values, then the pullback pass;
  the pullback pass alone (:meth:`Evaluator.run_pullback`) beside it;
- 4-parameter step: ``Evaluator.run(order=1)`` + the objective (forward mode).

Each score entry twice, side by side in turns: on the numba kernel (what runs: the
networks once per chunk, their columns as fields; the pullback from the pass
probability's sensitivities, :mod:`analysis.pipeline.backends.numba.fastreverse`, where the objective
reads the yields only) and on the JAX kernel (an evaluator with
``Backend(scores_on_numba=False, numba_reverse=False)``: what ran before).

The last line: the networks' own time within the best score step (each chunk's
forward with its vjp and the backward, results ready), against the 4-parameter step as
``optimize`` runs it: a floor for any step that trains the networks.

Goals: score step <= 4x the value-only pass, <= 1.5x the 4-parameter step.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.config.loader import config_from_dict  # noqa: E402
from analysis.driver.runner import Evaluator  # noqa: E402
from analysis.optimize.objectives import (  # noqa: E402
    Objective,
    objective_from_states,
    step_observables,
)
from analysis.optimize.reverse import (  # noqa: E402
    _cotangent,
    _payload,
    _to_numpy,
    reverse_objective,
)
from analysis.pipeline import scorecols  # noqa: E402
from analysis.pipeline.backend import Backend  # noqa: E402
from analysis.stats.pullback import prune  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def config(events: int, chunksize: int, score: bool, target: bool = False) -> dict:
    gen = REPO / "data" / "generated"
    tag_cut = ({"var": "score.tag", "op": ">", "param": "t2", "width": 0.3} if score else
               {"var": "btagDeepFlavB", "op": ">", "param": "t2", "width": 0.05})
    cfg = {
        "datasets": {
            "ttbar": {"generate": {"process": "ttbar", "events": events, "files": 1, "seed": 1,
                                   "dir": str(gen / f"bench_score_tt_{events}")},
                      "weight": "genWeight", "role": "signal", "xsec": 831.76},
            "dy": {"generate": {"process": "dy", "events": events, "files": 1, "seed": 2,
                                "dir": str(gen / f"bench_score_dy_{events}")},
                   "weight": "genWeight", "role": "background", "xsec": 6077.0},
        },
        "lumi": 10.0,
        "executor": {"type": "iterative", "chunksize": chunksize},
        "parameters": {
            "t0": {"init": 25.0, "bounds": [15.0, 120.0]},
            "t1": {"init": 2.4, "bounds": [0.5, 4.7]},
            "t2": {"init": 0.0 if score else 0.3, "bounds": [-3.0, 3.0] if score else [0.0, 0.95]},
            "t3": {"init": 20.0, "bounds": [0.0, 100.0]},
        },
        "objects": {"jets": {"collection": "Jet", "cuts": [
            {"var": "pt", "op": ">", "param": "t0", "width": 5.0},
            {"var": "abs_eta", "op": "<", "param": "t1", "width": 0.2}, tag_cut]}},
        "selection": [{"count": "jets", "op": ">=", "value": 2},
                      {"var": "MET.pt", "op": ">", "param": "t3", "width": 5.0}],
        "observables": [{"name": "ht", "x": "sum(jets.pt)", "stats": ["mean"]}],
        "objective": {"terms": [{"type": "significance", "sigma_b": 0.1}]},
    }
    if target:  # the objective reads an observable: its states are swept too
        cfg["objective"]["terms"].append(
            {"type": "target", "stat": "ttbar.ht.mean", "value": 300.0, "weight": 1e-4})
    if score:
        cfg["scores"] = [{"score": "tag", "mlp": {
            "inputs": ["jets.pt", "abs(jets.eta)", "jets.btagDeepFlavB", "jets.mass"],
            "hidden": [16, 16]}, "init": {"seed": 1},
            "standardise": {"mean": [50.0, 1.5, 0.3, 8.0], "std": [40.0, 1.0, 0.35, 5.0]}}]
    return cfg


def best(fns: dict, repeat: int) -> dict:
    """Best time of each function, run in turns (``repeat`` rounds after a warm-up that
    compiles and fills the cache), so that a change of the machine's load hits all alike."""
    for fn in fns.values():
        fn()
    times: dict = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: min(v) for k, v in times.items()}


# score plans on the JAX kernel: the networks' values and the pullback (what ran before)
JAX_SCORES = Backend(scores_on_numba=False, numba_reverse=False)


def entries(cs, ct, ev) -> dict:
    """The score entries timed on evaluator ``ev`` (its backend says which kernel)."""
    obj, objt = Objective(cs, ev.plan), Objective(ct, ev.plan)
    pay, payt = payloads(obj, ev), payloads(objt, ev)
    return {
        "values": lambda: ev.run(order=0),
        "step": lambda: reverse_objective(obj, ev, None, None),
        "pull": lambda: ev.run_pullback(None, pay),
        "stept": lambda: reverse_objective(objt, ev, None, None),
        "pullt": lambda: ev.run_pullback(None, payt),
    }


def payloads(obj, ev) -> dict:
    """The pullback pass's payloads at the initial parameters (as reverse_objective)."""
    states = ev.run(order=0)
    values = {n: st.taylor()[0] for n, st in states.items()}
    _, cot = _cotangent(obj, {n: st.sumw for n, st in states.items()},
                        {n: st.events for n, st in states.items()})(values)
    return {n: prune(_to_numpy(_payload(values[n], cot[n]))) for n in states}


def network_time(step, repeat: int) -> tuple[float, float]:
    """``(step, network)``: the best of ``repeat`` score steps and, in that step, the
    time spent in the networks alone: each chunk's forward with its vjp
    (:func:`analysis.pipeline.scorecols.score_columns` with ``vjp=True``, results ready)
    and the backward (``apply_vjps``). A lower bound of any step that trains them."""
    spent = [0.0]
    cols0, vjps0 = scorecols.score_columns, scorecols.apply_vjps

    def timed(fn):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            out = jax.block_until_ready(fn(*args, **kwargs))
            spent[0] += time.perf_counter() - t0
            return out
        return run

    scorecols.score_columns, scorecols.apply_vjps = timed(cols0), timed(vjps0)
    try:
        best_step, best_net = float("inf"), 0.0
        for _ in range(repeat):
            spent[0] = 0.0
            t0 = time.perf_counter()
            step()
            took = time.perf_counter() - t0
            if took < best_step:
                best_step, best_net = took, spent[0]
    finally:
        scorecols.score_columns, scorecols.apply_vjps = cols0, vjps0
    return best_step, best_net


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--chunksize", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    cs = config_from_dict(config(a.events, a.chunksize, True), base_dir=REPO)
    ct = config_from_dict(config(a.events, a.chunksize, True, target=True), base_dir=REPO)
    c4 = config_from_dict(config(a.events, a.chunksize, False), base_dir=REPO)
    load0 = os.getloadavg()[0]
    with (Evaluator(cs) as ev, Evaluator(cs, backend=JAX_SCORES) as evj,
          Evaluator(c4) as ev4):
        obj4 = Objective(c4, ev4.plan)
        print(f"score config: {len(ev.plan.trainable)} trainable parameters; "
              f"2 x {a.events} events, chunks of {a.chunksize}; load average {load0:.2f}")
        on_numba, on_jax = entries(cs, ct, ev), entries(cs, ct, evj)
        fns = {}
        for k in on_numba:  # in turns: numba, JAX
            fns[k], fns[k + "_jax"] = on_numba[k], on_jax[k]
        fns["four"] = lambda: objective_from_states(obj4, ev4.run(order=1), order=1)
        # as `optimize` runs it: the objective's states only (the significance: the yields)
        step_obs = step_observables(obj4, ev4.plan, 1)
        fns["four_opt"] = lambda: objective_from_states(
            obj4, ev4.run(order=1, observables=step_obs), order=1)
        t = best(fns, a.repeat)
        net_step, net = network_time(fns["step"], a.repeat)
    four = t["four"]
    for tag, sfx in (("numba (after)", ""), ("JAX (before)", "_jax")):
        values, step, pull, stept, pullt = (
            t[k + sfx] for k in ("values", "step", "pull", "stept", "pullt"))
        print(f"-- score plans on the {tag} kernel")
        print(f"value-only pass      {values:8.3f} s")
        print(f"score step (reverse) {step:8.3f} s   {step / values:5.2f}x the value-only pass "
              f"(goal <= 4); its pullback pass {pull:.3f} s = {pull / values:.2f}x")
        print(f"  objective + target on ttbar.ht.mean: step {stept:.3f} s = {stept / values:.2f}x, "
              f"pullback pass {pullt:.3f} s = {pullt / values:.2f}x; {stept / four:.2f}x the "
              "4-parameter step")
        print(f"4-parameter step     {four:8.3f} s   score step {step / four:5.2f}x it (goal <= 1.5)")
        if not sfx:
            from benchmarks.results_table import command_line, record

            for name, compares, figure, goal in (
                ("score.step_value", "373-parameter YAML step / value-only pass", step / values, 4.0),
                ("score.step_four", "373-parameter YAML step / 4-parameter step", step / four, 1.5),
            ):
                record(name, compares=compares, figure=figure, goal=f"<= {goal}x",
                       met=figure <= goal, command=command_line(__file__, None))
        print(f"  as optimize runs it (observables {step_obs}): {t['four_opt']:.3f} s, score step "
              f"{step / t['four_opt']:.2f}x it")
    print(f"the networks alone (forward with vjp + backward, in a step of {net_step:.3f} s): "
          f"{net:.3f} s = {net / t['four_opt']:.1f}x the 4-parameter step as optimize runs it "
          f"(any step that trains them takes at least this: 1.5x that step would be "
          f"{1.5 * t['four_opt']:.3f} s)")
    print(f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
