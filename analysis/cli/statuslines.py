"""What ``optimize`` and ``scan`` print at the end: the table of the final soft and hard
values, the status lines (converged or not, parameters at a bound, the hard-cut objective
before and after with its Monte Carlo uncertainty, the soft/hard gap) and the scan's best
point. Plain text from results.json's report; used by :mod:`analysis.cli.commands`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["floor_line", "status_lines"]


def floor_line(section: Any) -> str | None:
    """The warning of a ``likelihood`` section's ``floor_only`` where it warns
    (:func:`analysis.optimize.lksection.floor_only`), else None."""
    flag = section.get("floor_only") if isinstance(section, dict) else None
    return flag["message"] if flag and flag.get("warn") else None


def _print_final(report: dict[str, Any], outdir: Path, *, plots: bool = True) -> None:
    from rich.console import Console

    from analysis.cli.report import print_faults, print_warnings, pull_warning
    from analysis.cli.tables import fmt_number, print_table

    console = Console()
    soft, hard = report["final"]["soft"], report["final"]["hard"]
    rows = [
        ("objective", [fmt_number(soft["objective"]), fmt_number(hard["objective"])]),
        ("significance", [fmt_number(soft["significance"]), fmt_number(hard["significance"])]),
    ]
    units = report.get("units", {})
    for n in report["trainable"]:
        if n.startswith("score."):  # a learned score's weights: score_NAME.npz
            continue
        label = f"{n} [{units[n]}]" if units.get(n) else n
        rows.append((label, [fmt_number(soft["parameters"][n]), fmt_number(hard["parameters"][n])]))
    title = f"after {report['steps_run']} steps ({report['passes']} passes over the data)"
    print_table(console, title, "", ["soft", "hard\n(width 0)"], rows)
    for line in status_lines(report):
        console.print(line, highlight=False, markup=False)
    pulled = pull_warning(report.get("likelihood") or {})
    if pulled:  # the final hard-cut likelihood's mu = 0 fit
        console.print("warning " + pulled, highlight=False, markup=False)
    floor = floor_line(report.get("likelihood"))
    if floor:  # its Z from the floor (said at the start too)
        console.print("warning " + floor, highlight=False, markup=False)
    print_warnings(report["datasets"], console)
    print_faults(report.get("faults"), console)
    where = f" and plots in {outdir}" if plots else ""
    console.print(f"wrote {outdir / 'results.json'}{where}", highlight=False)


def status_lines(report: dict[str, Any]) -> list[str]:
    """The closing lines of ``optimize`` from results.json's ``status``: converged or not
    (and what to change), parameters at a bound, the hard-cut objective before and
    after, the soft/hard gap."""
    from analysis.cli.tables import fmt_number
    from analysis.cli.trustlines import trust_lines

    st = report["status"]
    if st.get("stopped"):  # the objective became undefined after the start
        lines = [f"status: stopped: {st['stopped']}"]
    elif st["converged"]:
        lines = [f"status: converged at step {st['step']} ({st['criterion']})"]
    else:
        change = st.get("relative_change")
        seen = "" if change is None else f"; last change {fmt_number(change)}"
        lines = [
            f"status: NOT converged in {st['steps_run']} steps (criterion: "
            f"{st['criterion']}{seen}); try {st['advice']}"
        ]
    if st["at_bound"]:
        bounds = report["bounds"]
        parts = [
            f"{n} = {fmt_number(bounds[n][0 if side == 'lower' else 1])} ({side})"
            for n, side in st["at_bound"].items()
        ]
        beyond = st.get("beyond_bound") or []
        why = (
            f"the objective still improves beyond for {', '.join(beyond)}: widen the bounds "
            "if that is physical" if beyond else "the optimum may lie beyond"
        )
        lines.append("at bound: " + ", ".join(parts) + f" ({why})")
    h, z = st["hard_objective"], st["hard_significance"]
    line = f"hard-cut objective: {fmt_number(h['initial'])} -> {fmt_number(h['final'])}"
    if z["final"] is not None or z["initial"] is not None:
        line += f" (significance {fmt_number(z['initial'])} -> {fmt_number(z['final'])})"
    if st["soft_hard_gap"] is not None:
        line += f"; soft - hard at the end: {fmt_number(st['soft_hard_gap'])}"
    lines.append(line)
    start, end = h["initial"], h["final"]
    if end is None or not math.isfinite(end):
        empty = [n for n, d in (report.get("datasets") or {}).items()
                 if d.get("hard_events") == 0]
        lines.append("the hard-cut objective is undefined at the final parameters" + (
            f": no event of {', '.join(empty)} passes the final hard cuts" if empty else ""))
    elif start is not None and math.isfinite(start) and end > start:
        # minimised: the soft objective improved, the hard cuts did not follow
        lines.append(
            "the hard-cut objective got worse: at these widths the soft objective's optimum "
            "is not the hard cuts'; try narrower widths (the cuts' and counts' width) or a "
            "smaller optimizer.anneal.final_width_factor"
        )
    lines.extend(_mc_lines(report))
    lines.extend(trust_lines(report))  # keep-best's choice, the relaxation gap
    return lines


def _pm(value: Any, sigma: Any) -> str:
    """``value +- sigma (MC stat.)``, or the value alone where sigma is unknown."""
    from analysis.cli.tables import fmt_number

    if value is None:
        return "undefined"
    if sigma is None or not math.isfinite(sigma) or sigma <= 0:
        return fmt_number(value)
    # the uncertainty to two significant digits, the value to the same decimal
    digits = max(0, 1 - math.floor(math.log10(sigma)))
    return f"{value:.{digits}f} +- {sigma:.{digits}f} (MC stat.)"


def _mc_lines(report: dict[str, Any]) -> list[str]:
    """The hard-cut result on all events with its MC uncertainty, and the validation
    split's verdict (results.json's ``uncertainty``, ``hard_all``, ``validation``)."""
    from analysis.cli.tables import fmt_number

    unc, every = report.get("uncertainty"), report.get("hard_all")
    lines = []
    if unc is not None and every is not None:
        z = every["significance"]
        if z["final"] is not None:  # the objective is -Z_A: same uncertainty
            lines.append(f"all events: Z = {_pm(z['initial'], unc['initial'])} -> "
                         f"Z = {_pm(z['final'], unc['final'])}")
        else:
            o = every["objective"]
            lines.append(f"all events: hard-cut objective {_pm(o['initial'], unc['initial'])}"
                         f" -> {_pm(o['final'], unc['final'])}")
    val = report.get("validation")
    if val is not None:
        u = val["uncertainty"]
        line = (f"validation ({fmt_number(100 * val['fraction'])} % held out): final hard-cut "
                f"objective train {_pm(val['train']['final'], u['train']['final'])}, held-out "
                f"{_pm(val['held_out']['final'], u['held_out']['final'])}")
        if val["gap_sigma"] is not None:
            line += (f"; gap {fmt_number(val['gap'])} ({fmt_number(val['gap_sigma'])} sigma)")
        lines.append(line + f": {val['message']}")
    return lines


def _best_line(best: dict[str, Any] | None) -> str:
    """``best: a = 1.000, b = 2.000: objective -3.000 (significance 3.000)``."""
    from analysis.cli.tables import fmt_number

    if best is None:
        return "no grid point has a defined objective"
    params = ", ".join(f"{n} = {fmt_number(v)}" for n, v in best["parameters"].items())
    line = f"best: {params}: objective {fmt_number(best['objective'])}"
    if best.get("significance") is not None:
        line += f" (significance {fmt_number(best['significance'])})"
    return line
