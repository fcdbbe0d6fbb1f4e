"""``diffcoffea optimize`` (:func:`run_optimize`): the loop, keep-best and the final
evaluations, results.json, and the plots drawn by worker processes while the job goes on.

The order after the loop is the plots' (``docs/explanation/performance.md``): as soon
as keep-best has chosen the final point, ``parameters.png`` is queued (from the path
the report then reads) and the histograms' pass runs and their figures are queued, so
that they are drawn while the final soft pass, the validation and the report are
computed here; ``objective.png`` follows once the run's status is known. The end's
programs are compiled beside the loop (:mod:`analysis.optimize.warmtail`).
"""

from __future__ import annotations

from analysis.cli.commands import _export, claim_run, make_evaluator, output_dir, write_json
from analysis.cli.startup import start_up_done
from analysis.cli.statuslines import _print_final
from analysis.config.loader import load_config
from analysis.errors import DiffcoffeaError

__all__ = ["run_optimize"]


def run_optimize(args) -> int:
    """``diffcoffea optimize``: the loop, then results.json (history, final soft and hard
    objective, how the run ended, per-dataset statistics) and plots in the output directory
    (drawn by :class:`analysis.cli.plotworker.PlotWorkers`)."""
    config = load_config(args.config)  # first: a bad config is refused before JAX loads
    from analysis.cli.plotworker import PlotWorkers

    # the plots' processes start now, importing matplotlib while JAX loads here
    # (analysis.cli.plotworker); the figures are drawn there while this one goes on
    plotter = PlotWorkers(0 if args.no_plots else _plot_workers())
    with plotter:
        return _run_optimize(args, config, plotter)


def _plot_workers() -> int:
    """Plot processes for ``optimize``: two (the history, the histograms) where there
    are two cores, else one (its imports still run beside the parent's)."""
    import os

    return 2 if (os.cpu_count() or 1) >= 2 else 1


def _run_optimize(args, config, plotter) -> int:
    from analysis.cli.plots import plot_scores
    from analysis.cli.report import hard_event_counts, mark_reliability, named_widths
    from analysis.optimize.keepbest import keep_best_report
    from analysis.optimize.loop import Optimization
    from analysis.pipeline.results import MIN_EFFECTIVE_EVENTS, dataset_report

    if config.scores:  # inputs standardised from a first pass (where not given)
        from analysis.driver.standardise import standardise_scores

        standardise_scores(config)
    from analysis.driver.autowidth import auto_widths

    auto = auto_widths(config)  # trainable thresholds without a width: from the data
    outdir = output_dir(config, args)
    quiet = args.quiet
    args.quiet = True  # per-pass coffea bars would drown the step bar
    # claim_run locks the output dir and refuses (or, with --overwrite, deletes) an
    # earlier checkpoint unless --resume continues it.
    with claim_run(config, args), make_evaluator(config, args) as ev:
        run = Optimization(config, ev, outdir, steps=args.steps,
                           initial_observables=not args.no_plots, background_checkpoints=True)
        if args.resume:
            run.resume()
        initial_params = config.initial_params()
        _loop(run, quiet, args)
        # optimizer.validation.every / keep_best: both parts at every N-th step (one
        # pass); with keep_best the best held-out step becomes the reported point
        passes = run.passes
        history = run.validation_history()
        tracked = run.passes - passes
        # the final point is chosen: the path (history, parameters, units) is what
        # results.json will say, and parameters.png and the histograms are drawn from it
        # while the final evaluations and the report are computed here
        path = _path_report(run, config)
        drawn = False
        if not args.no_plots:
            hard_p = run.hard_params(run.final_params())  # final()'s hard point
            plotter.submit("analysis.cli.plots.plot_parameters",
                           {**path, "final": {"hard": {"parameters": hard_p}}}, outdir, cost=1.5)
            if config.observables and run.all_sumw is not None:
                with run.all_events():
                    _submit_histograms(plotter, run, initial_params, outdir)
                drawn = True
        final = run.final()
        # values-only passes on the cached columns: the hard-cut objective where the run
        # started (for "before -> after") and the events the final hard cuts keep
        before = run.passes
        # all events (and, with the split, each part) at the start and the end, with
        # their MC uncertainty: one pass where the replicas run, which also gives the
        # hard-cut value at the start on the loop's events (else one pass more)
        checks = run.validation(initial_params, final["hard"]["parameters"])
        initial_hard = run.start_hard or run.hard(initial_params)
        status = run.status(final, initial_hard)
        closing = run.passes - before + 1  # (the count pass below is not the loop's)
        for part in ("soft", "hard"):
            final[part]["widths"] = named_widths(config, final[part]["widths"])
        report = {
            "config": str(config.source),
            "trainable": path["trainable"],
            "bounds": path["bounds"],
            "widths": named_widths(config, run.w0),
            "auto_widths": auto,
            "units": path["units"],
            "optimizer": config.optimizer.model_dump(mode="json"),
            "steps_run": run.step,
            "passes": run.step + tracked + run.final_passes + closing,
            "converged": run.converged,
            "status": status,
            "uncertainty": checks["uncertainty"],
            "hard_all": {"objective": checks["hard_all"],
                         "significance": checks["significance_all"]},
            "keep_best": keep_best_report(run.tracked),
            "history": path["history"],
            "final": final,
            "parameters": final["soft"]["parameters"],
            "min_effective_events": MIN_EFFECTIVE_EVENTS,
            "datasets": None,  # below, once the objective plot is drawing
            "faults": None,
        }
        if not args.no_plots:
            # drawn (in the workers) while this process goes on: the count pass, the
            # per-dataset report (docs/explanation/performance.md)
            plotter.submit("analysis.cli.plots.plot_objective", report, outdir, cost=1.0)
        hard = hard_event_counts(ev, final["hard"]["parameters"],
                                 observables=run.hard_observables())
        report["faults"] = ev.faults_report()
        if not args.no_plots:
            run.use_all_events()  # the plots show every event, not the training part
            if config.observables and not drawn:  # no sum of weights of all events yet
                _submit_histograms(plotter, run, initial_params, outdir)
        datasets = {n: dataset_report(run.final_states[n], run.plan) for n in config.datasets}
        mark_reliability(datasets, hard)
        report["datasets"] = datasets
        if checks["validation"] is not None:
            report["validation"] = checks["validation"]
            if history is not None:
                val = config.optimizer.validation
                report["validation"].update(every=val.every, keep_best=val.keep_best,
                                            best_step=run.best_step, history=history)
        if config.likelihood is not None:  # final soft and hard templates, Z, the fit
            from analysis.optimize.lksection import likelihood_section

            for part, st in (("soft", run.final_states), ("hard", run.final_hard_states)):
                try:
                    final[part]["likelihood"] = likelihood_section(config, run.plan, st)
                except DiffcoffeaError as err:  # unusable templates: said, not a crash
                    final[part]["likelihood"] = {"error": str(err)}
            report["likelihood"] = final["hard"]["likelihood"]
        if config.histograms:  # at the final hard cuts
            from analysis.optimize.lksection import histograms_section

            report["histograms"] = histograms_section(config, run.plan, run.final_hard_states,
                                                      final["hard"]["parameters"])
        write_json(outdir / "results.json", report)
        exported = _export(report, outdir)  # the final hard-cut model, for pyhf and Combine
        if run.plan.scores:  # the trained networks, data only (score_NAME.npz)
            from analysis.optimize.scoreopt import write_scores

            write_scores(run.plan, ev.theta_and_widths(final["soft"]["parameters"])[0], outdir)
        if not args.no_plots:
            if "channels" in (report.get("likelihood") or {}):  # templates and pulls
                from analysis.cli.plots import entries_noun
                from analysis.cli.units import expression_unit

                labels = {ch: f"{c.histogram}: {_hist_x(config, c.histogram)}"
                          for ch, c in config.likelihood.channels.items()}
                units = {ch: expression_unit(_hist_x(config, c.histogram), c.histogram)
                         for ch, c in config.likelihood.channels.items()}
                nouns = {ch: entries_noun(run.plan, _hist_x(config, c.histogram))
                         for ch, c in config.likelihood.channels.items()}
                plotter.submit("analysis.cli.lkplots.plot_likelihood", report["likelihood"],
                               outdir, labels=labels, units=units, nouns=nouns,
                               cost=len(labels) + 1.0)
            if run.plan.scores:  # score_NAME.png: signal and background, before and after
                sumw = {n: st.sumw for n, st in run.final_states.items()}
                plot_scores(ev, config, initial_params, final["hard"]["parameters"], outdir,
                            sumw=sumw)
            plotter.wait()  # every figure written (a job's error raised here)
    if not quiet:
        _print_final(report, outdir, plots=not args.no_plots)
        for p in exported:
            print(f"wrote {p}")
    return 0


def _path_report(run, config) -> dict:
    """results.json's ``trainable``, ``bounds``, ``units`` and ``history`` (with keep-best's
    hard-cut values, widths by cut), complete once keep-best has run: the report and
    ``parameters.png`` (:func:`analysis.cli.plots.plot_parameters`, drawn before the
    final evaluations with ``final.hard.parameters`` added) read the same objects."""
    from analysis.cli.report import named_widths
    from analysis.cli.units import units_of

    coords = run.coords
    return {
        "trainable": list(coords.names),
        "bounds": {
            n: [float(lo), float(hi)]
            for n, lo, hi, b in zip(coords.names, coords.lower, coords.upper, coords.bounded)
            if b  # a learned score's weights are unbounded
        },
        "units": units_of(config),
        "history": [{**h, "widths": named_widths(config, h["widths"])} for h in run.history],
    }


def _submit_histograms(plotter, run, initial: dict[str, float], outdir) -> None:
    """The histograms' pass (:func:`analysis.cli.plots.histogram_data`: the main
    observable at the initial and the final hard cuts, on the events the passes weigh
    now) and their figures queued on ``plotter``. The datasets' normalisation: every
    event's sum of weights (:attr:`~analysis.optimize.loop.Optimization.all_sumw`, else
    the final soft pass's)."""
    from analysis.cli.plots import histogram_data
    from analysis.optimize.objectives import dataset_norm

    config = run.config
    sumw = run.all_sumw or {n: st.sumw for n, st in run.final_states.items()}
    norms = {n: dataset_norm(config, n, w) for n, w in sumw.items()
             if config.datasets[n].xsec is not None or config.datasets[n].scale is not None}
    data = histogram_data(run.ev, config, initial, run.w0, run.hard_params(run.final_params()),
                          initial_states=run.initial_states, norms=norms)
    # the overlay (the costliest) first: with two workers it goes beside the per-dataset
    # histograms, the history's figures after them
    plotter.submit("analysis.cli.plots.draw_overlay", data, outdir, cost=2.0)
    for ds in data["datasets"]:
        plotter.submit("analysis.cli.plots.draw_histogram", data, ds, outdir)


def _hist_x(config, name: str) -> str:
    return next(h.x for h in config.histograms if h.name == name)


def _loop(run, quiet: bool, args) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [
        TextColumn("[bold blue]optimize"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("objective {task.fields[obj]}"),
        TextColumn("step {task.fields[dt]}"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, disable=quiet) as bar:
        task = bar.add_task("opt", total=run.opt_cfg.steps, completed=run.step, obj="-", dt="-")
        start_up_done(args)  # the imports are done; the passes run with the collector
        warming = None
        try:
            while not run.done:
                entry = run.do_step()
                if warming is None:  # the end's programs, compiled beside the steps
                    from analysis.optimize.warmtail import warm_tail

                    warming = warm_tail(run) or False
                if entry is not None:  # None: stopped (run.stopped says why)
                    bar.update(task, completed=run.step, obj=f"{entry['objective']:.6g}",
                               dt=f"{entry['wall_time_s']:.2f}s")
        except BaseException:  # (Ctrl-C too) the checkpoint being written is completed
            run.wait_checkpoint(raise_error=False)
            raise
        finally:  # no compilation left running into the end (nor the interpreter's exit)
            if warming:
                warming.join()
        run.wait_checkpoint()  # the last step's (a full disk: its one line, as before)
