"""The current benchmark table, made from the result files the benchmark scripts write.

The goal column shows only the goals a doc or an issue states (:data:`GOALS`, each with
its source); the verdict is the figure against that goal.

Each benchmark script calls :func:`record` once per figure it measures against a goal;
the record lands in ``benchmarks/results/<name>.json`` with the date and the commit it was
measured at. :func:`render` turns every record into one markdown table; the docs'
benchmarks page and ``benchmarks/README.md`` show it (``python benchmarks/results_table.py
--write`` refreshes the README's copy; a test checks that the two agree).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["GOALS", "command_line", "record", "render", "stated_goal"]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
BEGIN = "<!-- results table: made by python benchmarks/results_table.py --write -->"
END = "<!-- end of results table -->"


#: The goals the table shows: record name (a pattern) -> (goal, where it is stated). A goal
#: nobody stated (a script's own guess, or a bound recorded before an issue tightened it)
#: is not shown: the table's goal and verdict come from here, never from the record.
GOALS: dict[str, tuple[str, str]] = {
    "demo.main_job": ("<= 10 s", "issue 35"),
    "multiplicity.pass": ("<= 1.0x", "issue 33"),
    "own.*.first_cold": ("<= 10x", "issue 34"),
    "own.*.first_cold_numba": ("<= 25 s", "issue 49"),
    "own.*.first_warm": ("<= 2x", "issue 34"),
    "own.*.later": ("<= 1.0x", "issue 34"),
    "own.*.later_cached": ("<= 0.3x", "issue 34"),
    "own.*.later_cached_runner": ("<= 0.3x", "issue 34"),
    "own.*.futures_first": ("<= 2x", "issue 34"),
    "own.*.dask_first": ("<= 2x", "issue 34"),
    "own.*.futures_later": ("<= 1.0x", "issue 34"),
    "own.*.futures_later_cached": ("<= 1.0x", "issue 34"),
    "own.*.dask_later_cached_runner": ("<= 0.3x", "issue 34"),
    "params.reverse_vs_values": ("<= 4x", "issue 49"),
    "params.reverse_hists_obs_vs_values": ("<= 4x", "issue 49"),
    "params.reverse_hists_soft_vs_values": ("<= 4x", "issue 49"),
    "params.twelve_vs_four": ("<= 3x", "issue 49"),
    "pass.first": ("<= 1.5x", "issue 9"),
    "pass.cached": ("<= 0.4x", "issue 16"),
    "pass.step": ("<= 0.3x", "issue 49"),
    "pass.step_floor": ("<= 3x", "issue 49"),
    "rerun.first_step": ("<= 2x", "issue 35"),
    "score.step_value": ("<= 4x", "issue 18"),
    "startup.*": ("<= 0.5 s", "issue 35"),
    "systematics.full": ("<= 2.5x", "issue 17"),
    "trust.generated_vs_grid": (">= 0.95x", "issue 52"),
    "trust.real_vs_start": (">= 1x", "issue 52"),
}


def stated_goal(name: str) -> tuple[str, str] | None:
    """``(goal, source)`` of the record ``name`` from :data:`GOALS`, None where no doc or
    issue states one."""
    for pattern, stated in GOALS.items():
        if fnmatch.fnmatchcase(name, pattern):
            return stated
    return None


def _met(goal: str, figure: float) -> bool:
    """Whether ``figure`` meets ``goal`` (``"<= 0.3x"``, ``">= 0.95x"``, ``"<= 10 s"``)."""
    op, _, bound = goal.partition(" ")
    value = float(bound.split()[0].rstrip("x"))
    return figure <= value if op == "<=" else figure >= value


def _commit() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            # changes of the result files themselves (a run writes them) do not count
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
             ".", ":!benchmarks/results", ":!benchmarks/README.md"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def record(
    name: str,
    *,
    compares: str,
    figure: float,
    goal: str,
    met: bool | None,
    command: str,
    unit: str = "x",
    details: dict | None = None,
    directory: Path | None = None,
) -> Path:
    """Write one benchmark figure to ``results/<name>.json`` (replacing the last one).

    Parameters
    ----------
    name
        The record's name, unique across benchmarks (``pass.cached_step``).
    compares
        What is compared, in words (``cached gradient step / plain coffea pass``).
    figure
        The measured figure (a ratio, unless ``unit`` says otherwise).
    goal
        The goal as text (``<= 0.3x``); empty where there is none.
    met
        Whether the goal is met (``None`` where there is no goal).
    command
        The command that measured it, runnable from the repository root.
    unit
        The figure's unit (``x`` for a ratio, ``s``, ``MB``).
    details
        Further numbers worth keeping (times, sizes).
    directory
        Where to write (default: ``$DIFFCOFFEA_BENCH_RESULTS``, else ``benchmarks/results``;
        the tests of the benchmarks point the variable at a temporary folder).

    Returns
    -------
    pathlib.Path
        The file written.
    """
    if directory is None:
        directory = Path(os.environ.get("DIFFCOFFEA_BENCH_RESULTS", RESULTS))
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    entry = {
        "name": name,
        "compares": compares,
        "figure": float(figure),
        "unit": unit,
        "goal": goal,
        "met": met,
        "command": command,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "cores": os.cpu_count(),
        "details": details or {},
    }
    path = directory / f"{name}.json"
    path.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
    return path


def command_line(script: str, argv: list[str] | None) -> str:
    """The command that ran ``script`` (its ``__file__``) with ``argv``, from the root,
    as anyone can run it: an option whose value is an absolute path outside the
    repository (a scratch folder of one machine, ``--data-dir /tmp/bb``) is left out,
    since the script's default (a temporary folder) gives the same figure."""
    args = sys.argv[1:] if argv is None else list(argv)
    kept: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if arg.startswith("--") and eq and _scratch(value):
            i += 1
            continue
        if arg.startswith("--") and not eq and i + 1 < len(args) and _scratch(args[i + 1]):
            i += 2
            continue
        kept.append(arg)
        i += 1
    return " ".join(["python", f"benchmarks/{Path(script).name}", *kept])


def _scratch(value: str) -> bool:
    """True for an absolute path outside the repository."""
    path = Path(value)
    return path.is_absolute() and not path.resolve().is_relative_to(ROOT)


def _fmt(x: float, unit: str) -> str:
    if unit == "x":
        # two decimals, or two significant digits below 0.1 (0.0022x, not 0.00x)
        return f"{x:.2f}x" if abs(x) >= 0.095 or x == 0 else f"{x:.2g}x"
    return f"{x:.3g} {unit}"


def render(directory: Path | None = None) -> str:
    """The markdown table of every record in ``directory`` (sorted by name)."""
    directory = RESULTS if directory is None else Path(directory)
    rows = []
    for path in sorted(directory.glob("*.json")):
        e = json.loads(path.read_text())
        stated = stated_goal(e["name"])
        goal = f"{stated[0]} ({stated[1]})" if stated else "-"
        met = _met(stated[0], e["figure"]) if stated else None
        verdict = {True: "met", False: "**not met**", None: "-"}[met]
        rows.append(
            f"| `{e['name']}` | {e['compares']} | {goal} | "
            f"{_fmt(e['figure'], e.get('unit', 'x'))} | {verdict} | {e['date']} | "
            f"`{e['commit']}` | `{e['command']}` |"
        )
    if not rows:
        return "No benchmark has recorded a figure yet.\n"
    head = (
        "| benchmark | compares | goal | latest figure | verdict | date | commit | command |\n"
        "| --- | --- | --- | ---: | --- | --- | --- | --- |\n"
    )
    return head + "\n".join(rows) + "\n"


def write_readme(readme: Path, directory: Path | None = None) -> bool:
    """Put the current table between the README's markers; True if it changed."""
    text = readme.read_text()
    a, b = text.index(BEGIN), text.index(END)
    new = text[: a + len(BEGIN)] + "\n\n" + render(directory) + "\n" + text[b:]
    if new != text:
        readme.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="refresh the table in benchmarks/README.md and the recorded "
                             "figures the pages quote (each change printed)")
    args = parser.parse_args(argv)
    if args.write:
        write_readme(Path(__file__).resolve().parent / "README.md")
        write_quotes()
    else:
        sys.stdout.write(render())
    return 0


def write_quotes(root: Path = ROOT, directory: Path | None = None) -> list[str]:
    """Rewrite every stale recorded figure the pages quote (``benchmarks/quotes.py``) with
    its record's, printing and returning the changes: the prose around them is the
    author's to check (a verdict, a comparison)."""
    if str(ROOT) not in sys.path:  # run as a script: the repository root, as the benchmarks do
        sys.path.insert(0, str(ROOT))
    from benchmarks import quotes

    entries = quotes.records(RESULTS if directory is None else directory)
    done: list[str] = []
    for page, text in quotes.pages(root).items():
        new, changes = quotes.refresh(text, entries)
        if changes:
            (root / page).write_text(new)
            done += [f"{page}: {c}" for c in changes]
    for line in done:
        print(line)
    return done


if __name__ == "__main__":
    sys.exit(main())
