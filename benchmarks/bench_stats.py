"""Benchmark: soft-cut jet-pT moments and their Jacobian, the public API against awkward.

Run from the repository root:

    python benchmarks/bench_stats.py [--events 1000000] [--repeat 15] [--skip-awkward-jax]

Data (seeded): ``events`` events with Poisson(4) jets; per jet (float32, as in NanoAOD)
``pt = 15 + Exp(40)`` GeV, ``eta ~ N(0, 1.5)``, ``btag ~ U(0, 1)``. Soft selection
``w = s((pt - t0) / 5) * s((t1 - |eta|) / 0.1) * s((btag - t2) / 0.05)`` (sigmoids ``s``)
at ``t = (30 GeV, 2.4, 0.3)``. Each method computes the weighted mean, variance,
skewness and excess kurtosis of jet pT over all jets, and (except the hard-cut
baseline) their 4 x 3 Jacobian w.r.t. ``t``:

* ``public API``: what a diffcoffea user writes: ``stats.mean/var/skew/kurtosis`` of the
  soft-cut weights on a float64 :class:`analysis.stats.Jagged`, value and Jacobian under
  ``jax.jit(jax.jacfwd(...))`` (the data passed as arguments of the jitted function);
* ``awkward numpy``: what a coffea user runs today, hard cuts then ``ak.mean``,
  ``ak.var``, ``ak.moment`` of deviations, value only (no gradient);
* ``awkward JAX``: awkward's JAX backend, eagerly, ``ak.mean(..., weight=w)``,
  ``ak.var``, ``ak.moment``, with ``jax.jacfwd`` (slow: run once; ``--skip-awkward-jax``).

Fast paths are timed ``timeit``-style, best of ``--repeat`` calls after a warm-up
call, whose time (compilation) is reported separately. Every method runs in this one
process, so the ratios compare like with like even on a busy machine; the load
average is printed because the machine may be shared. The public API's values are
checked against a float64 numpy computation of the same weighted moments, and its
Jacobian against awkward JAX's when that runs.

Goals (issue 9): public API / awkward numpy <= 0.5 and awkward JAX / public API >= 50.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np

# `python benchmarks/bench_stats.py` from the repository root imports this checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis import stats  # noqa: E402

THETA = (30.0, 2.4, 0.3)
WIDTHS = (5.0, 0.1, 0.05)
GOAL_NUMPY = 0.5  # public API value + Jacobian / awkward numpy hard cuts, at most
GOAL_AKJAX = 50.0  # awkward JAX / public API, at least


def make_data(events: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    counts = rng.poisson(4.0, events)
    n = int(counts.sum())
    return {
        "counts": counts,
        "pt": (15.0 + rng.exponential(40.0, n)).astype(np.float32),
        "eta": rng.normal(0.0, 1.5, n).astype(np.float32),
        "btag": rng.uniform(0.0, 1.0, n).astype(np.float32),
    }


def best_of(func: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """(first call [compile + run], best of ``repeat`` later calls) in seconds, result."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(func())
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = jax.block_until_ready(func())
        best = min(best, time.perf_counter() - t0)
    return first, best, out


def api_method(d: dict[str, np.ndarray]) -> Callable[[jax.Array], Any]:
    """The public API as a user writes it: value and Jacobian, one ``jit``.

    The data are arguments of the jitted function (as the pipeline passes each chunk),
    not constants closed over: XLA compiles closed-over arrays into the program, which
    for 4M jets takes ~20 s of compilation (the same run time).
    """
    offsets = np.concatenate([[0], np.cumsum(d["counts"])])
    pt = stats.Jagged(jnp.asarray(d["pt"], dtype=jnp.float64), offsets)
    eta = jnp.asarray(d["eta"], dtype=jnp.float64)
    btag = jnp.asarray(d["btag"], dtype=jnp.float64)

    def moments4(theta: jax.Array, pt: stats.Jagged, eta: jax.Array, btag: jax.Array) -> jax.Array:
        w = (
            jax.nn.sigmoid((pt.values - theta[0]) / WIDTHS[0])
            * jax.nn.sigmoid((theta[1] - jnp.abs(eta)) / WIDTHS[1])
            * jax.nn.sigmoid((btag - theta[2]) / WIDTHS[2])
        )
        return jnp.stack(
            [
                stats.mean(pt, weight=w),
                stats.var(pt, weight=w),
                stats.skew(pt, weight=w),
                stats.kurtosis(pt, weight=w),
            ]
        )

    run = jax.jit(lambda theta, *data: (moments4(theta, *data), jax.jacfwd(moments4)(theta, *data)))
    return lambda theta: run(theta, pt, eta, btag)


def numpy_reference(d: dict[str, np.ndarray], theta: Sequence[float]) -> np.ndarray:
    """Float64 numpy weighted mean, variance, skewness, excess kurtosis (two passes)."""
    pt, eta, btag = (d[k].astype(np.float64) for k in ("pt", "eta", "btag"))

    def s(z: np.ndarray) -> np.ndarray:
        return 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free logistic sigmoid

    w = (
        s((pt - theta[0]) / WIDTHS[0])
        * s((theta[1] - np.abs(eta)) / WIDTHS[1])
        * s((btag - theta[2]) / WIDTHS[2])
    )
    mean = np.sum(w * pt) / np.sum(w)
    dev = pt - mean
    var, m3, m4 = (np.sum(w * dev**k) / np.sum(w) for k in (2, 3, 4))
    return np.array([mean, var, m3 / var**1.5, m4 / var**2 - 3.0])


def awkward_numpy_method(d: dict[str, np.ndarray]) -> Callable[[], Any]:
    jets = ak.zip({k: ak.unflatten(d[k], d["counts"]) for k in ("pt", "eta", "btag")})

    def run() -> np.ndarray:
        sel = (jets.pt > THETA[0]) & (abs(jets.eta) < THETA[1]) & (jets.btag > THETA[2])
        pt = jets.pt[sel]
        mean = ak.mean(pt)
        var = ak.var(pt)
        dev = pt - mean
        skew = ak.moment(dev, 3) / var**1.5
        kurt = ak.moment(dev, 4) / var**2 - 3.0
        return np.array([mean, var, skew, kurt])

    return run


def awkward_jax_method(d: dict[str, np.ndarray]) -> Callable[[jax.Array], Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # awkward's JAX backend
        ak.jax.register_and_check()
        jets = ak.to_backend(
            ak.zip(
                {
                    k: ak.unflatten(d[k].astype(np.float64), d["counts"])
                    for k in ("pt", "eta", "btag")
                }
            ),
            "jax",
        )

    def sigmoid(z: ak.Array) -> ak.Array:
        return 1.0 / (1.0 + np.exp(-z))

    def moments4(theta: jax.Array) -> jax.Array:
        w = (
            sigmoid((jets.pt - theta[0]) / WIDTHS[0])
            * sigmoid((theta[1] - abs(jets.eta)) / WIDTHS[1])
            * sigmoid((jets.btag - theta[2]) / WIDTHS[2])
        )
        mean = ak.mean(jets.pt, weight=w)
        var = ak.var(jets.pt, weight=w)
        dev = jets.pt - mean
        skew = ak.moment(dev, 3, weight=w) / var**1.5
        kurt = ak.moment(dev, 4, weight=w) / var**2 - 3.0
        return jnp.stack([jnp.asarray(v) for v in (mean, var, skew, kurt)])

    def run(theta: jax.Array) -> tuple[jax.Array, jax.Array]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return moments4(theta), jax.jacfwd(moments4)(theta)

    return run


def max_rel(a: Any, b: Any) -> float:
    """Largest ``|a - b|`` relative to the largest ``|b|`` of its row (last axis).

    For the values (one row of four moments in different units) pass them one by one
    as ``[..., None]``; for the Jacobian a row is one moment's derivatives.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = np.maximum(np.max(np.abs(b), axis=-1, keepdims=True), 1e-300)
    return float(np.max(np.abs(a - b) / scale))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=15, help="timed calls of the fast paths")
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument(
        "--skip-awkward-jax", action="store_true", help="skip the slow awkward JAX baseline"
    )
    args = parser.parse_args(argv)

    d = make_data(args.events, args.seed)
    theta = jnp.asarray(THETA, dtype=jnp.float64)
    print(
        f"{args.events} events, {d['pt'].size} jets (seed {args.seed}); "
        f"jax {jax.__version__}, awkward {ak.__version__}, backend {jax.default_backend()}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    )

    rows: list[tuple[str, str, float | None, float]] = []
    api = api_method(d)
    c, t_api, (v_api, j_api) = best_of(lambda: api(theta), args.repeat)
    rows.append(("public API, jit(jacfwd), float64", "value + 3-param Jacobian", c, t_api))
    _, t_np, v_np = best_of(awkward_numpy_method(d), args.repeat)
    rows.append(("awkward numpy, hard cuts", "value only, no gradient", None, t_np))
    t_akjax = None
    if not args.skip_awkward_jax:
        run = awkward_jax_method(d)
        t0 = time.perf_counter()
        v_ak, j_ak = jax.block_until_ready(run(theta))
        t_akjax = time.perf_counter() - t0
        rows.append(
            ("awkward JAX backend, eager jacfwd", "value + 3-param Jacobian (1 run)", None, t_akjax)
        )

    print()
    print(f"| {'method':36} | {'computes':34} | {'compile [s]':>11} | {'time [ms]':>9} |")
    print(f"|{'-' * 38}|{'-' * 36}|{'-' * 12}:|{'-' * 10}:|")
    for name, what, comp, t in rows:
        cs = f"{comp:.2f}" if comp is not None else "-"
        print(f"| {name:36} | {what:34} | {cs:>11} | {t * 1e3:9.1f} |")
    print()
    print(
        "public API vs float64 numpy:    values max rel diff "
        f"{max_rel(v_api[:, None], numpy_reference(d, THETA)[:, None]):.1e}"
    )
    if t_akjax is not None:
        print(
            "public API vs awkward JAX:      values max rel diff "
            f"{max_rel(v_api[:, None], v_ak[:, None]):.1e}, "
            f"Jacobian max rel diff {max_rel(j_api, j_ak):.1e}"
        )
    print(f"(hard cuts select a different sample; awkward numpy values {np.round(v_np, 4)})")
    print()
    ratio_np = t_api / t_np
    verdicts = [ratio_np <= GOAL_NUMPY]
    print(
        f"public API (value + Jacobian) / awkward numpy (value) = {ratio_np:.2f}   "
        f"(goal <= {GOAL_NUMPY}: {'met' if verdicts[-1] else 'NOT MET'})"
    )
    if t_akjax is not None:
        ratio_ak = t_akjax / t_api
        verdicts.append(ratio_ak >= GOAL_AKJAX)
        print(
            f"awkward JAX / public API = {ratio_ak:.0f}x faster   "
            f"(goal >= {GOAL_AKJAX:.0f}x: {'met' if verdicts[-1] else 'NOT MET'})"
        )
    if not all(verdicts):
        print("NOTE: a goal was not met in this run (see the load average above).")
    from benchmarks.results_table import command_line, record

    record("stats.api_numpy", compares="stats value + Jacobian / awkward numpy hard-cut value",
           figure=ratio_np, goal=f"<= {GOAL_NUMPY}x", met=ratio_np <= GOAL_NUMPY,
           command=command_line(__file__, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
