"""The closing lines of ``diffcoffea optimize`` on what the result can be trusted for.

Keep-best (results.json's ``keep_best``, :mod:`analysis.optimize.keepbest`): which
step's hard cuts are reported and their hard-cut objective with its MC uncertainty;
the relaxation gap (``status.relaxation_gap``, :func:`analysis.optimize.status.relaxation_gap`):
one line when the soft and the hard-cut objective differ by more than the MC
uncertainty, with the remedies that apply.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["trust_lines"]


def _pm(entry: dict[str, Any] | None) -> str:
    from analysis.cli.tables import fmt_number

    if not entry or entry.get("objective") is None:
        return "undefined"
    value, sigma = entry["objective"], entry.get("uncertainty")
    if sigma is None or not math.isfinite(sigma) or sigma <= 0:
        return fmt_number(value)
    digits = max(0, 1 - math.floor(math.log10(sigma)))
    return f"{value:.{digits}f} +- {sigma:.{digits}f} (MC stat.)"


def trust_lines(report: dict[str, Any]) -> list[str]:
    """The widths read from the data, the keep-best line and, where it is
    significant, the relaxation-gap line."""
    from analysis.cli.tables import fmt_number

    lines = []
    auto = report.get("auto_widths")
    if auto:
        told = ", ".join(f"{k} {fmt_number(v)}" for k, v in auto["widths"].items())
        lines.append(f"widths from the data (results.json auto_widths): {told}")
    kb = report.get("keep_best")
    if kb and kb.get("on"):
        part = {"held_out": "held-out part", "train": "training part",
                "all": "training events"}[kb["by"]]
        n = kb["steps_checked"]
        if kb["step"] is None:
            lines.append(f"keep-best: no point has a defined hard-cut objective on the {part}; "
                         "the last point is reported")
        else:
            where = ("the last point" if kb["step"] == report["steps_run"]
                     else f"step {kb['step']} of {report['steps_run']}")
            key = "held_out" if kb["by"] == "held_out" else None
            chosen = kb["chosen_held_out"] if key else kb["chosen"]
            start = kb["initial_held_out"] if key else kb["initial"]
            settled = kb.get("settled") or {}
            if settled.get("kept_last"):
                lines.append(
                    f"keep-best: reported point is the last point, within the noise of the "
                    f"best of {n} checked on the {part} (end - best "
                    f"{fmt_number(settled['difference'])}, <= {fmt_number(settled['threshold'])}"
                    f" x its MC uncertainty {fmt_number(settled['sigma'])}): {_pm(chosen)} "
                    f"(start {_pm(start)})")
            else:
                lines.append(f"keep-best: reported point is {where}, the best hard-cut "
                             f"objective on the {part} of {n} checked: {_pm(chosen)} "
                             f"(start {_pm(start)})")
    gap = (report.get("status") or {}).get("relaxation_gap")
    if gap and gap.get("significant"):
        within = f"its MC uncertainty {fmt_number(gap['uncertainty'])}"
        fix = "; try " + ", or ".join(gap["remedies"]) if gap["remedies"] else ""
        lines.append(f"soft and hard-cut objective differ: soft {fmt_number(gap['soft'])}, "
                     f"hard {fmt_number(gap['hard'])} (gap {fmt_number(gap['gap'])}, more "
                     f"than {within}){fix}")
    return lines
