"""Benchmark: one gradient step of an own processor against its number of parameters,
forward mode against reverse mode across chunks (issue 18).

Run from the repository root:

    python benchmarks/bench_reverse.py [--events 60000] [--chunks 3] [--repeat 3]

Data (seeded, in memory, as a column cache would hold them: no file is read): ``events``
events with Poisson(4) jets, ``pt = 15 + Exp(40)`` GeV, ``eta ~ N(0, 1.5)``,
``btag ~ U(0, 1)``, split into ``chunks`` equal chunks. The processor is written as in
``examples/own_processor.py`` (``stats.derive(fn, self.theta)`` in ``process``, chunks
merged by coffea's ``processor.accumulate``): jets weighed by 4 soft cuts (pt > t0,
|eta| < t1, btag > t2, pt < t3) and, for the larger parameter counts, a soft cut on a
learned score, an equinox MLP ``3 -> h -> h -> 1`` (tanh) of (pt, eta, btag),
standardised: P = 4 (cuts only), 5 + h^2 + 6h + 1 with the MLP (h = 7: 97; h = 16, the
issue's 16-16-1 network: 358; h = 29: 1021; h = 97: 9997). States: jet-pt moments and
the soft count; loss ``(mean - 70)^2 + std + 0.01 n``.

One step is ``jax.value_and_grad(loss)(theta)`` through ``stats.differentiable(run,
mode=...)`` at a new ``theta`` (best of ``--repeat`` after a first step that includes
JAX's per-shape compilation; the value pass and the steps of one P in turns); the
value-only pass is ``run`` of values only (``PassTheta(..., "values")``, what reverse
mode's first pass costs). Forward mode is
skipped above ``--forward-max`` parameters (its tangents are O(P x jets) in memory:
~9 GB at P = 1,000 here). Where both modes run, their gradients are compared.

With ``--table`` the parameters grow without the work per jet: the jet-pt threshold is
a table over ``P - 3`` equal bins of eta in (-4.5, 4.5) (each jet cut at its bin's
threshold, a gather; P = 4 is one bin, the 4 cuts above), no network: the step's cost
against the number of parameters alone, the network's own flops left out.

    python benchmarks/bench_reverse.py --table              # P = 4, 100, 1,000, 10,000

Goals (issue 18): the 16-16-1 MLP + cuts step <= 4x the value-only pass and <= 1.5x
the 4-parameter step; the step (mode="auto") flat within 2x from 4 to 10,000 parameters.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from coffea import processor

# `python benchmarks/bench_reverse.py` from the repository root imports this checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis import stats  # noqa: E402
from analysis.soft import soft_cut  # noqa: E402
from analysis.stats.derive import PassTheta  # noqa: E402

GOAL_VALUE = 4.0  # 16-16-1 step / value-only pass, at most
GOAL_FOUR = 1.5  # 16-16-1 step / 4-parameter step, at most
GOAL_FLAT = 2.0  # max / min step over 4 .. 10,000 parameters (auto mode), at most
WIDTHS = {4: None, 100: 7, 358: 16, 1000: 29, 10000: 97}


def make_chunks(events: int, chunks: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in np.diff(np.linspace(0, events, chunks + 1).astype(int)):
        counts = rng.poisson(4.0, n)
        jets = int(counts.sum())
        out.append(
            {
                "offsets": np.concatenate([[0], np.cumsum(counts)]),
                "pt": 15.0 + rng.exponential(40.0, jets),
                "eta": rng.normal(0.0, 1.5, jets),
                "btag": rng.uniform(0.0, 1.0, jets),
            }
        )
    return out


STANDARD = stats.Standardisation(np.array([55.0, 0.0, 0.5]), np.array([40.0, 1.5, 0.29]))


class ScoredJets(processor.ProcessorABC):
    """An own processor: soft cuts, optionally a soft cut on a learned score."""

    def __init__(self, theta: Any) -> None:
        self.theta = theta

    def process(self, chunk: dict[str, np.ndarray]) -> dict[str, Any]:
        pt, eta, btag = chunk["pt"], chunk["eta"], chunk["btag"]
        offsets = chunk["offsets"]

        def fn(th):
            if "pt_table" in th:  # each jet's threshold: its eta bin's entry (a gather)
                n_bins = th["pt_table"].shape[0]
                bins = np.clip(((eta + 4.5) / 9.0 * n_bins).astype(np.int64), 0, n_bins - 1)
                pt_min = th["pt_table"][bins]
            else:
                pt_min = th["pt_min"]
            w = (
                soft_cut(pt, ">", pt_min, 5.0)
                * soft_cut(np.abs(eta), "<", th["eta_max"], 0.1)
                * soft_cut(btag, ">", th["btag_min"], 0.05)
                * soft_cut(pt, "<", th["pt_max"], 20.0)
            )
            if "net" in th:
                cols = [stats.Jagged(v, offsets) for v in (pt, eta, btag)]
                s = stats.score(th["net"], cols, standard=STANDARD).values
                w = w * soft_cut(s, ">", th["cut"], 0.5)
            return {"jet_pt": stats.moments(pt, weight=w), "n": jnp.sum(w)}

        return {"jets": stats.derive(fn, self.theta)}

    def postprocess(self, accumulator: Any) -> Any:
        return accumulator


def theta_for(p: int, *, table: bool = False) -> dict[str, Any]:
    theta: dict[str, Any] = {"pt_min": 30.0, "eta_max": 2.4, "btag_min": 0.2, "pt_max": 300.0}
    if table:  # P - 3 thresholds in place of pt_min (P = 4: one bin)
        del theta["pt_min"]
        theta["pt_table"] = np.linspace(25.0, 35.0, p - 3)
        return theta
    if WIDTHS[p] is not None:
        theta.update(cut=0.0, net=stats.mlp(3, hidden=(WIDTHS[p],) * 2, seed=1))
    return theta


def n_params(theta: Any) -> int:
    return sum(int(np.size(v)) for v in jax.tree_util.tree_leaves(theta))


def loss_of(f):
    def loss(theta):
        s = f(theta)
        return (stats.mean(s["jet_pt"]) - 70.0) ** 2 + stats.std(s["jet_pt"]) + 0.01 * s["n"]

    return loss


def nudged(theta: Any, k: int) -> Any:
    """``theta`` with its first cut moved a little: a new point (no memoised pass)."""
    key = "pt_table" if "pt_table" in theta else "pt_min"
    return {**theta, key: theta[key] + 1e-3 * k}


def timed(funcs: dict[str, Any], repeat: int) -> dict[str, tuple[float, float, Any]]:
    """``{name: (first, best, output)}``: each function once (the first call, with its
    compilation), then ``repeat`` rounds of all of them in turns, so that a change of
    the shared machine's load hits all alike (their ratios are side by side)."""
    first, best, out = {}, {}, {}
    for name, func in funcs.items():
        t0 = time.perf_counter()
        out[name] = jax.block_until_ready(func(0))
        first[name] = time.perf_counter() - t0
        best[name] = float("inf")
    for k in range(1, repeat + 1):
        for name, func in funcs.items():
            t0 = time.perf_counter()
            out[name] = jax.block_until_ready(func(k))
            best[name] = min(best[name], time.perf_counter() - t0)
    return {name: (first[name], best[name], out[name]) for name in funcs}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=60_000)
    p.add_argument("--chunks", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--forward-max", type=int, default=100)
    p.add_argument("--params", type=int, nargs="*", default=None,
                   help="which P to run (default: 4 100 358 1000 10000; --table: 4 100 1000 10000)")
    p.add_argument("--table", action="store_true",
                   help="the parameters as a table of pt thresholds by eta bin (no network)")
    args = p.parse_args(argv)
    if args.params is None:
        args.params = [4, 100, 1000, 10000] if args.table else sorted(WIDTHS)
    chunks = make_chunks(args.events, args.chunks, args.seed)
    jets = sum(len(c["pt"]) for c in chunks)
    print(
        f"{args.events} events, {jets} jets, {args.chunks} chunks; load average "
        f"{os.getloadavg()[0]:.2f}; jax {jax.__version__}"
    )

    def run(theta):
        return processor.accumulate(ScoredJets(theta).process(c) for c in chunks)["jets"]

    rows: dict[int, dict[str, Any]] = {}
    for target in args.params:
        theta = theta_for(target, table=args.table)
        n = n_params(theta)
        row: dict[str, Any] = {"P": n}
        spec_params = jax.tree_util.tree_map(np.asarray, theta)
        funcs: dict[str, Any] = {
            "value": lambda k, sp=spec_params: run(PassTheta(nudged(sp, k), "values"))}
        for mode in ("forward", "reverse"):
            if mode == "forward" and n > args.forward_max:
                continue
            loss = loss_of(stats.differentiable(run, mode=mode))
            funcs[mode] = lambda k, loss=loss, th=theta: jax.value_and_grad(loss)(nudged(th, k))
        res = timed(funcs, args.repeat)
        row["value"] = res.pop("value")[1]
        grads = {}
        for mode, (first, best, (_, grad)) in res.items():
            row[mode], row[mode + "_first"] = best, first
            grads[mode] = np.concatenate(
                [np.ravel(g) for g in jax.tree_util.tree_leaves(grad)]
            )
        if len(grads) == 2:
            scale = np.abs(grads["forward"]).max()
            row["agree"] = float(np.abs(grads["forward"] - grads["reverse"]).max() / scale)
        row["auto_mode"] = stats.differentiable(run).mode_for(theta)
        row["auto"] = row.get(row["auto_mode"])
        rows[target] = row
        print(
            f"P = {n:6d}: value pass {row['value']:.3f} s"
            + "".join(
                f", {m} step {row[m]:.3f} s (first {row[m + '_first']:.2f} s, "
                f"{row[m] / row['value']:.2f}x value)"
                for m in ("forward", "reverse")
                if m in row
            )
            + (f", |fwd - rev| / max {row['agree']:.1e}" if "agree" in row else "")
            + f"; auto: {row['auto_mode']}",
            flush=True,
        )
    if 4 in rows and 358 in rows and not args.table:
        mlp, four = rows[358], rows[4]
        r_value = mlp["auto"] / mlp["value"]
        r_four = mlp["auto"] / four["auto"]
        print(
            f"16-16-1 MLP + cuts (P = {mlp['P']}): step / value pass = {r_value:.2f} "
            f"(goal <= {GOAL_VALUE}: {'met' if r_value <= GOAL_VALUE else 'not met'}); "
            f"step / 4-parameter step = {r_four:.2f} "
            f"(goal <= {GOAL_FOUR}: {'met' if r_four <= GOAL_FOUR else 'not met'})"
        )
        from benchmarks.results_table import command_line, record

        for name, compares, figure, goal in (
            ("reverse.step_value", "358-parameter step / value-only pass (own processor)",
             r_value, GOAL_VALUE),
            ("reverse.step_four", "358-parameter step / 4-parameter step (own processor)",
             r_four, GOAL_FOUR),
        ):
            record(name, compares=compares, figure=figure, goal=f"<= {goal}x",
                   met=figure <= goal, command=command_line(__file__, argv))
    autos = [r["auto"] for t, r in rows.items() if t != 358]
    if len(autos) > 1:
        flat = max(autos) / min(autos)
        print(
            f"auto-mode step, max / min over P = {', '.join(str(rows[t]['P']) for t in rows if t != 358)}: "
            f"{flat:.2f} (goal <= {GOAL_FLAT}: {'met' if flat <= GOAL_FLAT else 'not met'})"
        )
    ratios = [r["reverse"] / r["value"] for r in rows.values() if "reverse" in r]
    if len(ratios) > 1:
        print(
            f"reverse step / value pass over every P: {min(ratios):.2f} .. {max(ratios):.2f} "
            f"(spread {max(ratios) / min(ratios):.2f}x"
            + ("" if args.table else "; the value pass itself grows with the network") + ")"
        )
    return rows


if __name__ == "__main__":
    main()
