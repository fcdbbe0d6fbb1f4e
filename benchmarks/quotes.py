"""The recorded figures the docs quote, found, checked and refreshed.

A page quotes a recorded figure by naming its result file right after the number:
``0.322 s (`benchmarks/results/startup.refuse.json`)``, or one of the record's details
(a key of its ``details``) after a comma: ``2.13 s (`benchmarks/results/own.10k.later.json`,
`futures_startup`)``. The number must be the record's, rounded to the digits written.
``python benchmarks/results_table.py --write`` rewrites stale numbers with :func:`refresh`
(same digits) and prints each change; ``tests/benchmarks/test_benchmarks_docs.py`` fails on
any left.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["QUOTE", "Quote", "pages", "quotes", "records", "refresh", "stale"]

ROOT = Path(__file__).resolve().parents[1]

#: a quoted figure: the number, its unit, then the record (and a detail's key) in parentheses
#: (after a space or a line break: a quote wrapped by the page's line length is one too)
QUOTE = re.compile(
    r"(?P<number>\d+(?:\.\d+)?)(?P<unit> ?(?:x|s|ms|GB|MB|%)?)\s+"
    r"\(`benchmarks/results/(?P<name>[\w.]+)\.json`(?:, `(?P<key>\w+)`)?\)")

Quote = tuple[str, str, "str | None"]


def pages(root: Path = ROOT) -> dict[str, str]:
    """Every page that may quote a figure (the docs, the README, the benchmarks' README; not
    the changelog, not built or generated files): relative path -> text."""
    paths = sorted((root / "docs").rglob("*.md")) + [root / "README.md",
                                                      root / "benchmarks" / "README.md"]
    return {str(p.relative_to(root)): p.read_text() for p in paths
            if p.name != "changelog.md" and not {"_build", "_generated"} & set(p.parts)}


def records(directory: Path) -> dict[str, dict]:
    """Every result file in ``directory``: record name -> its entry."""
    return {p.name[: -len(".json")]: json.loads(p.read_text())
            for p in sorted(Path(directory).glob("*.json"))}


def quotes(text: str) -> list[Quote]:
    """``(number as written, record name, detail key or None)`` of every quoted figure."""
    return [(m["number"], m["name"], m["key"]) for m in QUOTE.finditer(text)]


def _value(entries: dict[str, dict], name: str, key: str | None) -> float | None:
    entry = entries.get(name)
    value = None if entry is None else (
        entry["figure"] if key is None else entry["details"].get(key))
    return float(value) if isinstance(value, (int, float)) else None


def _written(value: float, like: str) -> str:
    """``value`` with as many decimals as ``like`` has."""
    return f"{value:.{len(like.partition('.')[2])}f}"


def stale(text: str, entries: dict[str, dict]) -> list[str]:
    """The quoted figures of ``text`` that are not their record's, or name none, in words."""
    wrong = []
    for number, name, key in quotes(text):
        value = _value(entries, name, key)
        if value is None or _written(value, number) != number:
            wrong.append(f"{number} quoted from {name}{'/' + key if key else ''}: "
                         f"the record says {value!r}")
    return wrong


def refresh(text: str, entries: dict[str, dict]) -> tuple[str, list[str]]:
    """``text`` with every stale quoted number replaced by its record's (same digits), and
    the changes in words; a quote whose record or detail is missing is left as it is."""
    changes: list[str] = []

    def new(m: re.Match[str]) -> str:
        value = _value(entries, m["name"], m["key"])
        if value is None or _written(value, m["number"]) == m["number"]:
            return m.group(0)
        number = _written(value, m["number"])
        changes.append(f"{m['number']} -> {number} ({m['name']}{'/' + m['key'] if m['key'] else ''})")
        return number + m.group(0)[len(m["number"]):]

    return QUOTE.sub(new, text), changes
