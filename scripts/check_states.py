"""States/Jacobian regression check: proves a branch leaves every number unchanged.

Run from the repository root (``PYTHONPATH=$PWD``)::

    python scripts/check_states.py dump OUT.pkl [--configs GLOBS] [--exclude GLOBS] \
        [--orders 0,1] [--reverse]
    python scripts/check_states.py compare A.pkl B.pkl [--tol 1e-14]

``dump`` builds, for every ``configs/*.yaml`` (``--configs``, ``--exclude``: globs of the
stem, comma-separated, e.g. ``'agc_*,demo'``), the evaluator ``diffcoffea evaluate`` builds
(:func:`analysis.cli.commands.make_evaluator`, on the config's engine and chunk size;
score inputs standardised first, as the command line does) and runs one states pass at
the config's start parameters and widths per derivative order. It stores every leaf of
every dataset's states (``value``), of their Jacobian (``jac``, order >= 1) and the
dataset's events, sum of weights and chunks, as numpy arrays keyed
``config/order/dataset/part/path``. ``--reverse``: for every config with an objective,
the reverse-mode objective, gradient, significance and yields
(:func:`analysis.optimize.reverse.reverse_objective`, how ``optimize`` takes its gradient
with many parameters), keyed ``config/reverse/auto/...``; where that took the one-pass
yield gradients, the two-pass pullback (:meth:`analysis.driver.runner.Evaluator.run_pullback`)
is run too, keyed ``config/reverse/pullback/...``. A config or pass that fails is
recorded with its one-line reason (``failed``), and the dump goes on.

``compare`` prints, per config, pass and leaf family (``value``/``jac`` and the state
kind, datasets and observables merged), the max relative difference
``max|a - b| / max|a|`` over the family's leaves (each leaf scaled by its own largest
value; NaN equals NaN at the same place), ``bit for bit`` where it is 0 (a pass all bit for bit: one line, unless ``-v``), the leaves
missing on either side and the passes that failed, of the passes both dumps ran (a dump
of some configs or orders compares against a whole base; the others are listed as not
compared). Exit 1 if a difference exceeds
``--tol`` (default 1e-14), a leaf is missing or differs in shape, or a pass failed on
one side only; else 0.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import pickle
import re
import sys
import time
from argparse import Namespace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]

__all__ = ["compare", "dump", "family", "main", "relative_difference"]


# -- dump ---------------------------------------------------------------------------------
def _leaves(prefix: str, tree: Any, out: dict[str, np.ndarray]) -> None:
    """Every leaf of ``tree`` as a float64/int numpy array, keyed ``prefix`` + its path."""
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    for path, leaf in flat:
        out[prefix + jax.tree_util.keystr(path)] = np.array(leaf)


def _states(prefix: str, states: dict[str, Any], out: dict[str, np.ndarray]) -> None:
    for name, st in states.items():
        p = f"{prefix}/{name}"
        out[f"{p}/events"] = np.array(st.events)
        out[f"{p}/sumw"] = np.array(st.sumw)
        out[f"{p}/chunks"] = np.array(st.chunks)
        if st.enumeration is not None:
            out[f"{p}/enumeration"] = np.array(st.enumeration)
        d = st.derived
        _leaves(f"{p}/value", d.value, out)
        if getattr(d, "jac", None) is not None:
            _leaves(f"{p}/jac", d.jac, out)
        if getattr(d, "hess", None) is not None:
            _leaves(f"{p}/hess", d.hess, out)
        if getattr(d, "grad", None) is not None:  # a pullback pass's dL/dtheta share
            out[f"{p}/grad"] = np.array(d.grad)


def _reverse(prefix: str, res: dict[str, Any], out: dict[str, np.ndarray]) -> None:
    for key in ("objective", "grad", "significance"):
        if res.get(key) is not None:
            out[f"{prefix}/{key}"] = np.array(res[key], dtype=np.float64)
    for name, y in res["yields"].items():
        out[f"{prefix}/yields/{name}"] = np.array(y)


def _one_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip().splitlines()
    return text[0][:300] if text else type(err).__name__


def _dump_config(path: Path, orders: list[int], reverse: bool,
                 out: dict[str, np.ndarray], failed: dict[str, str]) -> None:
    from analysis.cli.commands import make_evaluator
    from analysis.config.loader import load_config

    name = path.stem
    config = load_config(str(path))
    if config.scores:  # as evaluate and optimize: inputs standardised from a first pass
        from analysis.driver.standardise import standardise_scores

        standardise_scores(config)
    args = Namespace(executor=None, workers=None, chunksize=None, quiet=True,
                     skip_bad_files=None, no_cache=False, backend=None)
    with make_evaluator(config, args) as ev:
        for order in orders:
            t0 = time.perf_counter()
            try:
                _states(f"{name}/{order}", ev.run(order=order), out)
            except Exception as err:  # recorded (e.g. out of memory), the dump goes on
                failed[f"{name}/{order}"] = _one_line(err)
            _say(f"  {name} order {order}: {time.perf_counter() - t0:.1f} s")
        if reverse and config.objective is not None:
            from analysis.optimize.objectives import Objective
            from analysis.optimize.reverse import reverse_objective

            t0 = time.perf_counter()
            try:
                objective = Objective(config, ev.plan)
                _reverse(f"{name}/reverse/auto", reverse_objective(objective, ev, None, None), out)
                if "_yield_rows" in objective.__dict__:  # it took the one-pass yield gradients:
                    objective.__dict__["_one_pass"] = False  # the pullback pass as well
                    _reverse(f"{name}/reverse/pullback",
                             reverse_objective(objective, ev, None, None), out)
            except Exception as err:
                failed[f"{name}/reverse"] = _one_line(err)
            _say(f"  {name} reverse: {time.perf_counter() - t0:.1f} s")


def _say(line: str) -> None:
    print(line, flush=True)


def _matches(stem: str, patterns: str) -> bool:
    return any(fnmatch.fnmatch(stem, g.strip()) for g in patterns.split(",") if g.strip())


def dump(out_path: str, pattern: str = "*", orders: tuple[int, ...] = (0, 1),
         reverse: bool = False, exclude: str = "") -> dict[str, Any]:
    """Run the passes (module docstring) and pickle ``{"leaves", "failed", "meta"}``."""
    paths = sorted(p for p in (REPO / "configs").glob("*.yaml")
                   if _matches(p.stem, pattern) and not _matches(p.stem, exclude))
    if not paths:
        raise SystemExit(f"no config matches configs/{pattern}.yaml")
    leaves: dict[str, np.ndarray] = {}
    failed: dict[str, str] = {}
    result = {"leaves": leaves, "failed": failed,
              "meta": {"configs": [], "orders": list(orders), "reverse": reverse,
                       "repo": str(REPO)}}
    start = time.perf_counter()
    for path in paths:
        t0 = time.perf_counter()
        try:
            _dump_config(path, list(orders), reverse, leaves, failed)
        except Exception as err:  # a config that cannot even be set up
            failed[path.stem] = _one_line(err)
        note = f" FAILED {failed[path.stem]}" if path.stem in failed else ""
        _say(f"{path.stem}: {time.perf_counter() - t0:.1f} s{note}")
        result["meta"]["configs"].append(path.stem)
        # written after each config: an interrupted dump keeps (and compares) those done
        with open(out_path, "wb") as f:
            pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
    for key, reason in failed.items():
        _say(f"failed {key}: {reason}")
    _say(f"wrote {out_path}: {len(leaves)} leaves, {len(failed)} failed, "
         f"{time.perf_counter() - start:.1f} s")
    return result


# -- compare ------------------------------------------------------------------------------
def family(key: str) -> tuple[str, str]:
    """``(pass, family)`` of a leaf key, e.g. ``("demo/1", "jac[observables][*][moments]")``:
    the dataset, the observable (or histogram) name and the state's field merged."""
    parts = key.split("/")
    if parts[1] == "reverse":  # config/reverse/kind/name[/dataset]
        return "/".join(parts[:3]), parts[3]
    rest = "/".join(parts[3:])  # config/order/dataset/rest
    rest = re.sub(r"^(value|jac|hess)\[('observables'|'histograms'|'templates')\]\['[^']*'\]",
                  r"\1[\2][*]", rest)
    return "/".join(parts[:2]), re.sub(r"\.[a-z_0-9]+$", "", rest).replace("'", "")


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """``max|a - b| / max|a|`` (NaN equal NaN at the same place; inf where a NaN or an
    infinity is on one side only, or the shapes differ; ``max|a - b|`` where ``a`` is 0)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    if a.size == 0:
        return 0.0
    na, nb = np.isnan(a), np.isnan(b)
    if (na != nb).any():
        return math.inf
    a, b = a[~na], b[~nb]
    if a.size == 0:
        return 0.0
    fin = np.isfinite(a)
    if (fin != np.isfinite(b)).any() or (a[~fin] != b[~fin]).any():
        return math.inf
    diff = float(np.max(np.abs(a[fin] - b[fin]), initial=0.0))
    scale = float(np.max(np.abs(a[fin]), initial=0.0))
    return diff / scale if scale > 0 else diff


def _run_of(key: str) -> str:
    """The pass of a leaf or failure key: ``config/order``, ``config/reverse`` or ``config``."""
    return "/".join(key.split("/")[:2])


def compare(a: dict[str, Any], b: dict[str, Any], tol: float = 1e-14,
            write=print, verbose: bool = False) -> int:
    """Print the comparison of two dumps (module docstring); the exit code. A pass whose
    families are all bit for bit is one line unless ``verbose``."""
    la, lb = a["leaves"], b["leaves"]
    fa, fb = a.get("failed", {}), b.get("failed", {})
    # the passes both dumps ran (or failed): a dump of some configs or orders (--configs,
    # --exclude, --orders) compares against a whole base; a config that failed as a
    # whole counts as every pass of it
    ran = [{_run_of(k) for k in (*x, *y)} for x, y in ((la, fa), (lb, fb))]
    configs = [{r.split("/")[0] for r in side} for side in ran]
    both = (ran[0] & ran[1]) | {r for r in ran[0] | ran[1]
                                if "/" not in r and r in configs[0] & configs[1]}
    for side, mine in (("A", ran[0]), ("B", ran[1])):
        alone = sorted(r for r in mine - both if r.split("/")[0] not in both)
        if alone:
            write(f"not compared, only in {side}: {', '.join(alone)}")
    la, lb, fa, fb = ({k: v for k, v in x.items() if _run_of(k) in both
                       or k.split("/")[0] in both} for x in (la, lb, fa, fb))
    worst: dict[tuple[str, str], tuple[float, str]] = {}
    count: dict[tuple[str, str], int] = {}
    for key in sorted(set(la) & set(lb)):
        fam = family(key)
        d = relative_difference(la[key], lb[key])
        if fam not in worst or d > worst[fam][0]:
            worst[fam] = (d, key)
        count[fam] = count.get(fam, 0) + 1
    bad = False
    for run in sorted({r for r, _ in worst}):
        fams = sorted((fam, d, key) for (r, fam), (d, key) in worst.items() if r == run)
        if not verbose and all(d == 0 for _, d, _ in fams):  # one line for the pass
            n = sum(count[run, fam] for fam, _, _ in fams)
            write(f"{run}: bit for bit ({len(fams)} families, {n} leaves)")
            continue
        write(run)
        for fam, d, key in fams:
            verdict = "bit for bit" if d == 0 else f"{d:.3e} (largest: {key})"
            if d > tol:
                verdict += f"  > {tol:g}"
                bad = True
            write(f"  {fam} ({count[run, fam]} leaves): {verdict}")
    for side, x, y in (("A", la, lb), ("B", lb, la)):
        gone = sorted(set(x) - set(y))
        if gone:
            bad = True
            write(f"{len(gone)} leaves only in {side}:")
            for key in gone[:50]:
                write(f"  {key}")
            if len(gone) > 50:
                write(f"  ... {len(gone) - 50} more")
    for key in sorted(set(fa) | set(fb)):
        write(f"failed {key}: A: {fa.get(key, 'ran')} | B: {fb.get(key, 'ran')}")
        if (key in fa) != (key in fb):
            bad = True
    n = sum(count.values())
    write(f"{n} common leaves; max relative difference "
          f"{max((d for d, _ in worst.values()), default=0.0):.3e}; " + ("DIFFERENT" if bad else "same"))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="run every config's passes and pickle the leaves")
    d.add_argument("out")
    d.add_argument("--configs", default="*", help="globs of config stems, comma-separated (default: all)")
    d.add_argument("--exclude", default="", help="globs of config stems left out")
    d.add_argument("--orders", default="0,1", help="derivative orders (default 0,1)")
    d.add_argument("--reverse", action="store_true",
                   help="also the reverse-mode objective and gradient")
    c = sub.add_parser("compare", help="compare two dumps")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--tol", type=float, default=1e-14)
    c.add_argument("-v", "--verbose", action="store_true",
                   help="every family, also of passes that are bit for bit")
    args = parser.parse_args(argv)
    if args.cmd == "dump":
        orders = tuple(int(o) for o in args.orders.split(",") if o.strip())
        dump(args.out, args.configs, orders, args.reverse, args.exclude)
        return 0
    dumps = []
    for p in (args.a, args.b):
        with open(p, "rb") as f:
            dumps.append(pickle.load(f))
    return compare(*dumps, tol=args.tol, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
