"""What a pass produces for people: the results.json structure and a terminal summary."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from analysis.cli.tables import fmt_number, print_table
from analysis.cli.units import units_of
from analysis.pipeline.results import (
    MIN_EFFECTIVE_EVENTS,
    DatasetState,
    dataset_report,
    unreliable_reason,
    width_labels,
)

__all__ = [
    "evaluation_report",
    "hard_event_counts",
    "mark_reliability",
    "named_widths",
    "print_faults",
    "print_summary",
    "print_warnings",
]


def named_widths(config, widths) -> dict[str, float]:
    """``{cut label: width}`` (:func:`analysis.pipeline.results.width_labels`) for results.json."""
    return {n: float(w) for n, w in zip(width_labels(config), np.asarray(widths).reshape(-1))}


def hard_event_counts(evaluator, params: dict[str, float] | None = None, *,
                      observables: Collection[str] | None = None) -> dict[str, int]:
    """``{dataset: events passing the hard cuts}`` at ``params`` (default: the config's
    initial values): one values-only pass at width 0 with every event weighing 1, so
    each dataset's selected sum of weights is that count (integer parameters are
    rounded half up by the width-0 step). ``observables``: the pass computes only these
    (names, as :meth:`analysis.driver.runner.Evaluator.run`; the counts are the
    selection's, the same whichever: ``optimize`` passes its hard-cut passes' own, so
    that no other plan is prepared); default all."""
    zeros = np.zeros(evaluator.plan.n_widths)
    states = evaluator.run(params, widths=zeros, order=0, unit_weights=True,
                           observables=observables)
    return {
        name: int(round(float(st.derived.value["selected_sumw"]))) for name, st in states.items()
    }


def mark_reliability(datasets: dict[str, dict[str, Any]], hard: dict[str, int]) -> None:
    """Add ``hard_events``, ``reliable`` and (if not) ``warning`` to each dataset entry.

    Unreliable (:func:`analysis.pipeline.results.unreliable_reason`): fewer than
    :data:`~analysis.pipeline.results.MIN_EFFECTIVE_EVENTS` effective selected events,
    or no event passing the hard cuts. The statistics stay in the entry, marked."""
    for name, entry in datasets.items():
        entry["hard_events"] = hard.get(name)
        reason = unreliable_reason(entry.get("effective_events"), entry["hard_events"])
        entry["reliable"] = reason is None
        if reason is not None:
            entry["warning"] = f"statistics unreliable: {reason}"


def evaluation_report(
    evaluator,
    states: dict[str, DatasetState],
    overrides: dict[str, float] | None = None,
    *,
    hard: dict[str, int] | None = None,
) -> dict[str, Any]:
    """``{"parameters", "trainable", "widths", "units", "executor", "datasets", "faults"}``
    for results.json; ``widths`` keyed by cut, ``units`` by name; with ``hard`` (:func:`hard_event_counts`),
    each dataset is marked (:func:`mark_reliability`)."""
    theta, widths = evaluator.theta_and_widths(overrides)
    plan = evaluator.plan
    datasets = {name: dataset_report(states[name], plan) for name in evaluator.config.datasets}
    if hard is not None:
        mark_reliability(datasets, hard)
    return {
        "config": str(evaluator.config.source),
        "parameters": {n: float(v) for n, v in zip(plan.param_names, theta)},
        "trainable": list(plan.trainable_names),
        "widths": named_widths(evaluator.config, widths),
        "units": units_of(evaluator.config),
        "min_effective_events": MIN_EFFECTIVE_EVENTS,
        "executor": {
            "type": evaluator.executor_type,
            "workers": evaluator.workers,
            "chunksize": evaluator.chunksize,
            "chunks": len(evaluator.chunks),
        },
        "datasets": datasets,
        "faults": evaluator.faults_report(),
    }


def _selection_line(r: dict[str, Any]) -> str:
    eff = r.get("effective_events")
    parts = [f"{fmt_number(0.0 if eff is None else eff)} effective events"]
    if r.get("hard_events") is not None:
        parts.append(f"{r['hard_events']} pass the hard cuts")
    return "selected: " + ", ".join(parts)


def print_warnings(datasets: dict[str, dict[str, Any]], console: Any) -> None:
    """One line per unreliable dataset (see :func:`mark_reliability`)."""
    from rich.markup import escape

    for ds, r in datasets.items():
        if r.get("warning"):
            console.print(
                f"[yellow]warning[/] {escape(ds)}: {escape(r['warning'])} (marked *)",
                markup=True,
                highlight=False,
            )


def print_summary(report: dict[str, Any], path: Path) -> None:
    """A table per dataset: events, yields, effective events, and each statistic with its
    gradient; every number whole (:mod:`analysis.cli.tables`); the observables of an
    unreliable selection marked ``*`` and named in a warning line."""
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    # no derivative columns for a values-only pass (many trainable parameters)
    names = report["trainable"] if report.get("derivatives", "forward") else []
    headers = ["value", *(f"d/d\n{n}" for n in names)]
    for ds, r in report["datasets"].items():
        mark = "" if r.get("reliable", True) else "*"
        rows: list[tuple[str, list[str] | None]] = []

        def row(label: str, entry: dict[str, Any], rows: list = rows) -> None:
            grad = entry["grad"] or {}  # null: a values-only pass (dataset_report)
            cells = [fmt_number(entry["value"]), *(fmt_number(grad.get(n)) for n in names)]
            rows.append((label, cells))

        for key in ("selected_sumw", "selected_sumw2"):
            row(key, {"value": r[key], "grad": r[f"{key}_grad"]})
        for obs, stats in r["observables"].items():
            rows.append((obs + mark, None))
            for stat, entry in stats.items():
                if "value" in entry:
                    row(f"  {stat}", entry)
                else:
                    for part, sub in entry.items():  # fit errors: the note under the table
                        row(f"  {stat}.{part}", sub)
        title = (
            f"{ds}: {r['events']} events, sum of weights {fmt_number(r['sumw'])}; "
            f"{_selection_line(r)}"
        )
        print_table(console, title, "statistic", headers, rows)
    lk = report.get("likelihood")
    if lk and "significance" in lk:  # the binned likelihood's Z, as a table of one row
        fit = "converged" if lk["fit"]["converged"] else "NOT converged"
        title = (f"likelihood: {len(lk['channels'])} channel(s), "
                 f"{len(lk['fit']['nuisances'])} nuisances profiled (mu = 0 fit {fit})")
        rows = [significance_row(lk, names)]
        if lk.get("upper_limit"):
            rows.append(limit_row(lk, names))
        print_table(console, title, "statistic", headers, rows)
        line = pull_warning(lk)
        if line:
            console.print(f"[yellow]warning[/] {escape(line)}", markup=True, highlight=False)
    note = fit_error_note(report)
    if note:
        console.print(note, highlight=False, markup=False)
    print_warnings(report["datasets"], console)
    print_faults(report.get("faults"), console)
    console.print(f"wrote {path}", highlight=False)


#: statistic -> its fields that are errors computed with the weights as 1/sigma^2
FIT_ERRORS = {"linear_fit": ("intercept_error", "slope_error")}


def fit_error_note(report: dict[str, Any]) -> str | None:
    """One line under the tables where a ``linear_fit`` error is shown: which weights its
    errors assume, and what they mean with MC event weights.

    Parameters
    ----------
    report : dict
        results.json's content.

    Returns
    -------
    str or None
        The line, or None where no table shows such an error.
    """
    shown = any(stat in FIT_ERRORS for r in report.get("datasets", {}).values()
                for stats in r.get("observables", {}).values() for stat in stats)
    if not shown:
        return None
    return ("note: linear_fit's intercept_error and slope_error are ak.linear_fit's, with the "
            "weights as 1/sigma^2 of each point (w = 1/sigma^2); with MC event weights "
            "(genWeight) they are no statistical uncertainty of the fit")


def pull_warning(lk: dict[str, Any]) -> str | None:
    """One line naming the nuisances of results.json's likelihood ``fit.large_pulls``
    (fitted beyond ``fit.pull_threshold`` prior standard deviations), or None.

    Parameters
    ----------
    lk : dict
        The ``likelihood`` section of results.json.

    Returns
    -------
    str or None
        The line, or None when no nuisance is pulled that far (or the section predates
        the flag).
    """
    fit = lk.get("fit") or {}
    pulls = fit.get("large_pulls") or {}
    if not pulls:
        return None
    named = ", ".join(f"{n} {v:+.1f}" for n, v in sorted(pulls.items(), key=lambda kv: -abs(kv[1])))
    return (f"the mu = 0 fit pulls {len(pulls)} nuisance(s) beyond "
            f"{fit.get('pull_threshold', 3.0):g} sigma ({named}): the model absorbs the "
            "signal there; pyhf's default bounds (+-5) would stop them, so the exported "
            "workspace widens its bounds (likelihood.fit.large_pulls in results.json)")


def significance_row(lk: dict[str, Any], names: list[str]) -> tuple[str, list[str]]:
    """The table row ``(label, cells)`` of results.json's likelihood ``significance``:
    Z and dZ/dparameter, each marked unreliable when the mu = 0 fit did not converge."""
    sig = lk["significance"]
    cells = [fmt_number(sig["value"]), *(fmt_number(sig["grad"].get(n)) for n in names)]
    if not sig.get("reliable", lk["fit"]["converged"]):  # Z of an unconverged minimum
        return ("discovery Z (UNRELIABLE: fit not converged)",
                [f"{c} (unreliable)" for c in cells])
    return "discovery Z", cells


def limit_row(lk: dict[str, Any], names: list[str]) -> tuple[str, list[str]]:
    """The table row ``(label, cells)`` of results.json's likelihood ``upper_limit``: the
    expected CLs limit on mu and its gradient, marked unreliable when it did not converge."""
    lim = lk["upper_limit"]
    cells = [fmt_number(lim["value"]), *(fmt_number(lim["grad"].get(n)) for n in names)]
    label = f"expected CLs limit on mu ({100 * (1 - lim.get('level', 0.05)):g}% CL)"
    if not lim.get("reliable", True):
        return (f"{label} (UNRELIABLE: not converged)", [f"{c} (unreliable)" for c in cells])
    return label, cells


def print_faults(faults: dict[str, Any] | None, console: Any) -> None:
    """Skipped files/chunks and dropped non-finite entries, one line each (if any)."""
    if not faults:
        return
    for f in faults["skipped"]:
        entries = "" if f["entries"] is None else f", entries {f['entries'][0]}-{f['entries'][1]}"
        console.print(
            f"[yellow]skipped[/] {f['dataset']}: {f['file']}{entries}: {f['reason']}",
            markup=True,
            highlight=False,
        )
    for ds, d in faults["dropped"].items():
        branches = ", ".join(f"{b} {n}" for b, n in d["branches"].items())
        console.print(
            f"[yellow]dropped[/] {ds}: {d['objects']} objects and {d['events']} events "
            f"with non-finite values ({branches})",
            markup=True,
            highlight=False,
        )
