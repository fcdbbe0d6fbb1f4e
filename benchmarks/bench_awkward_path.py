"""Benchmark: ``analysis.stats`` called on awkward Arrays (the drop-in) against awkward itself.

Run from the repository root:

    python benchmarks/bench_awkward_path.py [--events 100000] [--repeat 5]

Data (seeded): ``events`` events with Poisson(5) jets, ``pt = 15 + Exp(40)``,
``eta ~ N(0, 1.5)`` (float64), one weight per event. Each row calls the same statistic with the same
arguments through ``analysis.stats`` and through awkward (numpy backend, eager), checks
that the numbers agree (1e-10 relative; ``linear_fit`` 1e-8, see :func:`agree`), and
prints the median time of ``--repeat`` calls after a warm-up call (whose time includes
any compilation). Both run in this one process, our call and awkward's alternately,
so that both see the same load (medians: robust to other jobs on the machine).

This is the cost of the drop-in path, not the fast path: inside ``jax.jit`` use a
``stats.Jagged`` (``bench_stats.py`` measures that one).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np

# `python benchmarks/bench_awkward_path.py` from the repository root imports this checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis import stats  # noqa: E402


def make_data(events: int, seed: int) -> tuple[ak.Array, ak.Array, ak.Array]:
    """Jet pT and eta (float64 lists) and one weight per event."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(5.0, events)
    n = int(counts.sum())
    # float64: awkward keeps float32 sums for float32 input in linear_fit (digits lost
    # on nearly equal x), while we upcast first, so float32 would compare roundings.
    pt = 15.0 + rng.exponential(40.0, n)
    eta = rng.normal(0.0, 1.5, n)
    weight = ak.Array(rng.uniform(0.5, 1.5, events))
    return ak.unflatten(pt, counts), ak.unflatten(eta, counts), weight


def calls(
    pt: ak.Array, eta: ak.Array, w: ak.Array
) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(label, ours, awkward's) for each measured call."""
    return [
        ("mean(pt, axis=1)", lambda: stats.mean(pt, axis=1), lambda: ak.mean(pt, axis=1)),
        (
            "var(pt, weight=per_event, axis=1)",
            lambda: stats.var(pt, weight=w, axis=1),
            lambda: ak.var(pt, weight=w, axis=1),
        ),
        ("mean(pt)", lambda: stats.mean(pt), lambda: ak.mean(pt)),
        ("var(pt)", lambda: stats.var(pt), lambda: ak.var(pt)),
        ("mean(pt, axis=0)", lambda: stats.mean(pt, axis=0), lambda: ak.mean(pt, axis=0)),
        (
            "linear_fit(eta, pt, axis=1)",
            lambda: stats.linear_fit(eta, pt, axis=1),
            lambda: ak.linear_fit(eta, pt, axis=1),
        ),
    ]


def _timed(func: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = func()
    return time.perf_counter() - t0, out


def side_by_side(
    ours: Callable[[], Any], theirs: Callable[[], Any], repeat: int
) -> tuple[float, float, float, Any, Any]:
    """(our first call, our median, awkward's median) in seconds, and both results;
    the ``repeat`` timed calls alternate between the two."""
    first, r_ours = _timed(ours)
    _, r_ak = _timed(theirs)
    t_ours, t_ak = [], []
    for _ in range(repeat):
        t, r_ours = _timed(ours)
        t_ours.append(t)
        t, r_ak = _timed(theirs)
        t_ak.append(t)
    return first, float(np.median(t_ours)), float(np.median(t_ak)), r_ours, r_ak


def _numbers(result: Any) -> np.ndarray:
    if isinstance(result, ak.Record | ak.Array) and result.fields:
        return np.concatenate([_numbers(result[f]) for f in result.fields])
    arr = ak.to_numpy(ak.fill_none(ak.flatten(result, axis=None), np.nan))
    return np.asarray(arr, dtype=np.float64)


def agree(ours: Any, theirs: Any, rtol: float = 1e-10) -> bool:
    """Equal to ``rtol``; NaN where awkward gives inf counts as equal (our rule for an
    undefined ``linear_fit``, listed in the README's table of differences)."""
    a = _numbers(ours if isinstance(ours, ak.Array | ak.Record) else ak.Array([ours]))
    b = _numbers(theirs if isinstance(theirs, ak.Array | ak.Record) else ak.Array([theirs]))
    if a.shape != b.shape:
        return False
    close = np.abs(a - b) <= rtol * np.maximum(np.abs(b), 1.0)
    undefined = np.isnan(a) & ~np.isfinite(b)
    return bool(np.all(close | undefined))


def run(events: int, repeat: int, seed: int = 7) -> list[dict[str, Any]]:
    rows = []
    for label, ours, theirs in calls(*make_data(events, seed)):
        first, t_ours, t_ak, r_ours, r_ak = side_by_side(ours, theirs, repeat)
        # awkward's linear_fit works from raw sums and loses digits on lists with
        # nearly equal x (3e-9 on two-jet events here, where ours, centred, equals
        # the exact rational result; README, differences from awkward)
        rtol = 1e-8 if label.startswith("linear_fit") else 1e-10
        rows.append(
            {
                "call": label,
                "first": first,
                "ours": t_ours,
                "awkward": t_ak,
                "agree": agree(r_ours, r_ak, rtol),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args(argv)
    pt, _, _ = make_data(args.events, 7)
    print(
        f"{args.events} events, {len(ak.flatten(pt))} jets; awkward {ak.__version__}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    rows = run(args.events, args.repeat)
    print(f"| {'call':<34} | first [ms] | ours [ms] | awkward [ms] | ratio | agree |")
    print(f"|{'-' * 36}|-----------:|----------:|-------------:|------:|-------|")
    for r in rows:
        print(
            f"| {r['call']:<34} | {1e3 * r['first']:10.1f} | {1e3 * r['ours']:9.1f} | "
            f"{1e3 * r['awkward']:12.1f} | {r['ours'] / r['awkward']:5.2f} | {r['agree']} |"
        )
    return 0 if all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
