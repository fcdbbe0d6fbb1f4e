"""The commands behind the command line (:mod:`analysis.cli.parser`): ``evaluate``,
``optimize``, ``scan``, ``make-dataset``, and what they share (output directory
claim, JSON writing, the evaluator built from the arguments, summaries).

Each takes the parsed ``argparse`` namespace and returns an exit code; user errors are
raised as :class:`~analysis.errors.DiffcoffeaError` (the command line prints one line).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from analysis.cli.jsonout import json_safe, write_json
from analysis.cli.paramargs import _parse_sets, parse_grid
from analysis.cli.startup import start_up_done
from analysis.cli.statuslines import _best_line, status_lines
from analysis.config.loader import load_config
from analysis.errors import DiffcoffeaError
from analysis.jsonsafe import read_json

__all__ = [
    "claim_run",
    "cmd_evaluate",
    "cmd_make_dataset",
    "json_safe",
    "make_evaluator",
    "output_dir",
    "parse_grid",
    "run_scan",
    "status_lines",
    "write_json",
]


def output_dir(config, args) -> Path:
    """``--output`` if given, else the config's ``output.dir``."""
    return Path(args.output) if args.output else Path(config.output.dir)


def make_evaluator(config, args):
    """The driver for ``config`` with the command line's executor overrides."""
    from analysis.driver.runner import Evaluator
    return Evaluator(
        config,
        executor=args.executor,
        workers=args.workers,
        chunksize=args.chunksize,
        status=not args.quiet,
        skip_bad_files=getattr(args, "skip_bad_files", None),
        cache=False if getattr(args, "no_cache", False) else None,
        backend=getattr(args, "backend", None),
        # numba's initialisation overlaps the file checks and the set-up (issue 35);
        # vector's numba extension is not needed by the kernels (numpy arrays)
        warm_up=True,
        skip_numba_extensions=("vector",),
    )


def cmd_evaluate(args) -> int:
    config = load_config(args.config)  # first: a bad config is refused before JAX loads
    from analysis.cli.report import evaluation_report, hard_event_counts, print_summary

    if config.scores:  # inputs standardised from a first pass (where not given)
        from analysis.driver.standardise import standardise_scores

        standardise_scores(config)
    overrides = _parse_sets(args.set, config)
    start = time.perf_counter()
    with claim_run(config, args), make_evaluator(config, args) as ev:
        order, note = _evaluate_order(ev.plan)
        start_up_done(args)
        states = ev.run(overrides, order=order)
        if note:  # said once the pass has run (an input error is the one line otherwise)
            import warnings

            from analysis.errors import DiffcoffeaWarning

            warnings.warn(DiffcoffeaWarning(note), stacklevel=1)
        hard = hard_event_counts(ev, overrides)  # values only, from the cached columns
        report = evaluation_report(ev, states, overrides, hard=hard)
        if config.histograms:  # the configured histograms at the selection
            from analysis.optimize.lksection import histograms_section

            report["histograms"] = histograms_section(
                config, ev.plan, states, {**config.initial_params(), **overrides})
        if config.likelihood is not None:  # templates, Z and dZ/dparam at these parameters
            from analysis.cli.statuslines import floor_line
            from analysis.optimize.lksection import likelihood_section

            report["likelihood"] = likelihood_section(config, ev.plan, states)
            floor = floor_line(report["likelihood"])
            if floor:  # Z from the floor: said, and flagged in results.json and the datacard
                import warnings

                from analysis.errors import DiffcoffeaWarning

                warnings.warn(DiffcoffeaWarning(floor), stacklevel=1)
        report["derivatives"] = "forward" if order else None
    report["wall_time_s"] = time.perf_counter() - start
    out = output_dir(config, args)
    write_json(out / "results.json", report)
    exported = _export(report, out)
    if not args.quiet:
        print_summary(report, out / "results.json")
        for p in exported:
            print(f"wrote {p}")
    return 0


def _export(report: dict[str, Any], out: Path) -> list:
    """workspace.json, shapes.root and datacard.txt (:mod:`analysis.cli.export`) of the
    report's ``likelihood`` section, if it has templates; their paths."""
    if "channels" not in (report.get("likelihood") or {}):
        return []
    from analysis.cli.export import write_exports

    return write_exports(report["likelihood"], out)


def _evaluate_order(plan) -> tuple[int, str | None]:
    """``(1, None)``: statistics with forward-mode derivatives, up to the forward-mode
    bound of trainable parameters (:data:`analysis.stats.derive.AUTO_FORWARD_MAX`, the
    rule ``optimize`` switches to reverse mode by); ``(0, note)``: values only beyond it,
    ``note`` the one warning line saying so. Forward mode carries one tangent per
    parameter per entry (a learned score's ~1,000 weights asked for 100 GB on a
    20,000-event chunk), and a reverse pass gives the gradient of one number (the
    objective, which ``optimize`` takes), not of every statistic."""
    from analysis.stats.derive import AUTO_FORWARD_MAX, choose_mode

    n = len(plan.trainable_names)
    if choose_mode(n) == "forward":
        return 1, None
    return 0, (f"{n} trainable parameters, more than the {AUTO_FORWARD_MAX} that forward-mode "
               "derivatives are computed for: evaluate reports values only (optimize takes "
               "the objective's gradient in reverse mode)")


def cmd_make_dataset(args) -> int:
    from analysis.data.generate import write_dataset
    if args.events < 0 or args.files < 1:
        raise DiffcoffeaError(
            f"--events must be >= 0 and --files >= 1, got {args.events} and {args.files}"
        )
    paths = write_dataset(
        args.outdir, process=args.process, n_events=args.events, n_files=args.files,
        seed=args.seed, where=f"make-dataset {args.outdir}",
    )
    for p in paths:
        print(p)
    return 0


def claim_run(config, args) -> contextlib.AbstractContextManager[Path]:
    """Check and lock the output directory before any computation (:mod:`analysis.cli.outdir`).

    For ``optimize``, an earlier checkpoint there is kept unless ``--resume`` continues
    it or ``--overwrite`` deletes it.
    """
    from analysis.cli.outdir import claim_output
    from analysis.optimize.checkpoint import CHECKPOINT, LEGACY_CHECKPOINT
    if getattr(args, "resume", False) and getattr(args, "overwrite", False):
        raise DiffcoffeaError("--resume and --overwrite contradict each other (continue the "
                              "checkpoint, or delete it and start over); give one")
    out = output_dir(config, args)
    if args.command == "evaluate":
        _keep_optimize_run(out)
    claim = claim_output(out, command=args.command)
    if args.command != "optimize" or args.resume:
        return claim
    stack = contextlib.ExitStack()
    stack.enter_context(claim)
    with stack:  # released again if the checkpoint check fails
        for name in (CHECKPOINT, LEGACY_CHECKPOINT):
            old = out / name
            if not old.exists():
                continue
            if not args.overwrite:
                if name == CHECKPOINT and same_config_checkpoint(old, config):
                    # The README's command run twice: the earlier run (finished or
                    # interrupted) is continued, which reports a finished one again.
                    args.resume = True
                    print(f"{old}: continuing the earlier run of this config (--overwrite "
                          "starts over)", file=sys.stderr)
                    break
                raise DiffcoffeaError(
                    f"{old}: a checkpoint of an earlier run is there; add --resume to continue "
                    "it or --overwrite to start over"
                )
            old.unlink()
        return stack.pop_all()


def _keep_optimize_run(out: Path) -> None:
    """Refuse an ``evaluate`` into an ``optimize`` run's directory, before any computation:
    its results.json, workspace.json, shapes.root and datacard.txt at the optimised
    point would be replaced by those at the config's initial parameters, silently."""
    from analysis.optimize.checkpoint import CHECKPOINT, LEGACY_CHECKPOINT

    for name in (CHECKPOINT, LEGACY_CHECKPOINT):
        try:
            there = (out / name).exists()
        except OSError:  # an unusable path: claim_output names it in one line
            return
        if there:
            raise DiffcoffeaError(
                f"{out}: holds an optimize run ({name}); evaluate would replace its "
                "results.json and exported model: give another directory with -o"
            )


def same_config_checkpoint(path: Path, config) -> bool:
    """Whether the checkpoint at ``path`` was made with ``config`` (the same fingerprint);
    raises a one-line :class:`DiffcoffeaError` naming what changed when it was not.

    Parameters
    ----------
    path : Path
        An existing checkpoint.
    config : Config
        The run's config.

    Returns
    -------
    bool
        True when the checkpoint matches the config.
    """
    from analysis.optimize import checkpoint as ckpt
    from analysis.optimize.loop import config_fingerprint

    try:
        data = ckpt.read_checkpoint(path)
    except ckpt.CheckpointError as err:
        raise DiffcoffeaError(f"{err}; add --overwrite to start over (--resume cannot read it)") from None
    if data.get("fingerprint") == config_fingerprint(config):
        return True
    stored = data.get("config")
    what = ckpt.config_change(stored, ckpt.config_snapshot(config)) if stored is not None else None
    detail = f" ({what})" if what else ""
    raise DiffcoffeaError(
        f"{path}: a checkpoint of an earlier run with another config is there{detail}; add "
        "--overwrite to start over, or use another --output"
    )


# --- scan ----------------------------------------------------------------------------


def run_scan(args) -> int:
    """``diffcoffea scan``: :func:`analysis.optimize.scan.scan` on the ``--grid``, written to
    scan.json (and into results.json when an optimisation left one there)."""
    config = load_config(args.config)  # first: a bad config is refused before JAX loads
    from analysis.optimize.scan import scan

    outdir = output_dir(config, args)
    with claim_run(config, args):  # the output dir is checked first, as for optimize
        grid = parse_grid(args.grid, config)
        start = time.perf_counter()
        with make_evaluator(config, args) as ev:
            start_up_done(args)
            result = scan(config, ev, grid)
            result["faults"] = ev.faults_report()
        result["wall_time_s"] = time.perf_counter() - start
        write_json(outdir / "scan.json", result)
        results = outdir / "results.json"
        if results.exists():  # keep the scan beside an optimisation's results
            data = read_json(results, "results file (JSON)", error=DiffcoffeaError)
            data["scan"] = result
            write_json(results, data)
    if not args.quiet:
        print(f"{result['n_points']} grid points in one pass; {_best_line(result['best'])}")
        print(f"wrote {outdir / 'scan.json'}")
    return 0
