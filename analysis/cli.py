"""Command line: ``diffcoffea evaluate | optimize | scan | make-dataset`` (also ``python -m analysis``).

Errors in the input (config, files, branches) print one line and exit with code 2;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from analysis.errors import DiffcoffeaError


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="YAML analysis config")
    p.add_argument("--output", "-o", help="output directory (default: the config's output.dir)")
    p.add_argument(
        "--executor", choices=["iterative", "futures", "dask"], help="override executor.type"
    )
    p.add_argument("--workers", type=int, help="override executor.workers")
    p.add_argument("--chunksize", type=int, help="override executor.chunksize")
    p.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    p.add_argument(
        "--skip-bad-files",
        action="store_true",
        default=None,
        help="go on without unreadable files/chunks (listed in results.json); "
        "default: config's skip_bad_files (false)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="diffcoffea",
        description="Differentiable selections and statistics over NanoAOD with coffea.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("evaluate", help="one pass: statistics and their gradients")
    _add_run_options(p)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a parameter value",
    )

    p = sub.add_parser("optimize", help="optimise the selection parameters")
    _add_run_options(p)
    p.add_argument("--steps", type=int, help="override optimizer.steps")
    p.add_argument(
        "--resume", action="store_true", help="continue from the checkpoint in the output dir"
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")

    p = sub.add_parser("scan", help="hard-cut objective on a grid (all points in one pass)")
    _add_run_options(p)
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=LO:HI:N",
        help="grid of one parameter (repeat for more); other parameters stay at init",
    )

    p = sub.add_parser("make-dataset", help="write NanoAOD-layout demo files")
    p.add_argument("outdir")
    p.add_argument("--process", choices=["ttbar", "dy"], required=True)
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--files", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    return parser


def _root_cause(err: BaseException) -> DiffcoffeaError | None:
    """A user-facing error, possibly wrapped by coffea's executors."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, DiffcoffeaError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def _parse_sets(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise DiffcoffeaError(f"--set {item!r}: expected NAME=NUMBER") from None
    return out


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def output_dir(config, args) -> Path:
    return Path(args.output) if args.output else Path(config.output.dir)


def make_evaluator(config, args):
    from analysis.runner import Evaluator

    return Evaluator(
        config,
        executor=args.executor,
        workers=args.workers,
        chunksize=args.chunksize,
        status=not args.quiet,
        skip_bad_files=getattr(args, "skip_bad_files", None),
    )


def cmd_evaluate(args) -> int:
    from analysis.config import load_config
    from analysis.report import evaluation_report, print_summary

    config = load_config(args.config)
    overrides = _parse_sets(args.set)
    start = time.perf_counter()
    with make_evaluator(config, args) as ev:
        states = ev.run(overrides)
        report = evaluation_report(ev, states, overrides)
    report["wall_time_s"] = time.perf_counter() - start
    out = output_dir(config, args)
    write_json(out / "results.json", report)
    if not args.quiet:
        print_summary(report, out / "results.json")
    return 0


def cmd_make_dataset(args) -> int:
    from analysis.generate import write_dataset

    if args.events < 0 or args.files < 1:
        raise DiffcoffeaError(
            f"--events must be >= 0 and --files >= 1, got {args.events} and {args.files}"
        )
    paths = write_dataset(
        args.outdir, process=args.process, n_events=args.events, n_files=args.files, seed=args.seed
    )
    for p in paths:
        print(p)
    return 0


def cmd_optimize(args) -> int:
    from analysis.optimize import run_optimize

    return run_optimize(args)


def cmd_scan(args) -> int:
    from analysis.optimize import run_scan

    return run_scan(args)


COMMANDS = {
    "evaluate": cmd_evaluate,
    "optimize": cmd_optimize,
    "scan": cmd_scan,
    "make-dataset": cmd_make_dataset,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("diffcoffea: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        cause = _root_cause(err)
        if cause is None or args.debug:
            raise
        print(f"diffcoffea: error: {cause}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
