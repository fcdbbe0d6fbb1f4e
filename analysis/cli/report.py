"""What a pass produces for people: the results.json structure and a terminal summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.pipeline.results import DatasetState, dataset_report

__all__ = [
    "evaluation_report",
    "print_summary",
]


def evaluation_report(
    evaluator, states: dict[str, DatasetState], overrides: dict[str, float] | None = None
) -> dict[str, Any]:
    """``{"parameters", "trainable", "widths", "executor", "datasets"}`` for results.json."""
    theta, widths = evaluator.theta_and_widths(overrides)
    plan = evaluator.plan
    return {
        "config": str(evaluator.config.source),
        "parameters": {n: float(v) for n, v in zip(plan.param_names, theta)},
        "trainable": list(plan.trainable_names),
        "widths": [float(w) for w in widths],
        "executor": {
            "type": evaluator.executor_type,
            "workers": evaluator.workers,
            "chunksize": evaluator.chunksize,
            "chunks": len(evaluator.chunks),
        },
        "datasets": {
            name: dataset_report(states[name], plan) for name in evaluator.config.datasets
        },
        "faults": evaluator.faults_report(),
    }


def _fmt(x: Any) -> str:
    return "nan" if x is None else f"{x:.6g}"


def print_summary(report: dict[str, Any], path: Path) -> None:
    """A short table per dataset: events, yields and each statistic with its gradient."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    names = report["trainable"]
    for ds, r in report["datasets"].items():
        table = Table(
            title=f"{ds}: {r['events']} events, sum of weights {_fmt(r['sumw'])}",
            title_justify="left",
        )
        table.add_column("statistic", no_wrap=True)
        table.add_column("value", justify="right")
        for n in names:
            table.add_column(f"d/d {n}", justify="right")

        def row(label: str, entry: dict[str, Any], table: Table = table) -> None:
            table.add_row(label, _fmt(entry["value"]), *(_fmt(entry["grad"][n]) for n in names))

        for key in ("selected_sumw", "selected_sumw2"):
            row(key, {"value": r[key], "grad": r[f"{key}_grad"]})
        for obs, stats in r["observables"].items():
            for stat, entry in stats.items():
                if "value" in entry:
                    row(f"{obs}.{stat}", entry)
                else:
                    for part, sub in entry.items():
                        row(f"{obs}.{stat}.{part}", sub)
        console.print(table)
    print_faults(report.get("faults"), console)
    console.print(f"wrote {path}")


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
