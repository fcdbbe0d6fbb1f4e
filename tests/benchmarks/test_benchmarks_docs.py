"""The benchmarks back the docs (issue 51): every figure a page quotes from a result file
is that file's figure, every result file and script a page names exists, every script
answers ``--help``, and no result file is kept that neither a page quotes nor the table
shows against a stated goal.

A page quotes a recorded figure as ``0.322 s (`benchmarks/results/startup.refuse.json`)``,
or one of the record's details as ``2.13 s (`benchmarks/results/own.10k.later.json`,
`futures_startup`)``: the number must be the record's, rounded to the digits written.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.results_table import RESULTS, ROOT, stated_goal

#: the pages that may quote benchmark figures: the docs, the README, the benchmarks' README
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md",
                                                  ROOT / "benchmarks" / "README.md"]
RESULT = re.compile(r"benchmarks/results/([\w.]+)\.json")
SCRIPT = re.compile(r"benchmarks/(bench_\w+\.py)")
#: a quoted figure: the number, its unit, then the record (and a detail's key) in parentheses
QUOTE = re.compile(
    r"(?P<number>\d+(?:\.\d+)?) ?(?:x|s|ms|GB|MB|%)? \(`benchmarks/results/(?P<name>[\w.]+)\.json`"
    r"(?:, `(?P<key>\w+)`)?\)")


def _pages() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in PAGES
            if p.name != "changelog.md" and not {"_build", "_generated"} & set(p.parts)}


def _records() -> dict[str, dict]:
    return {p.name[: -len(".json")]: json.loads(p.read_text())
            for p in sorted(Path(RESULTS).glob("*.json"))}


def quoted_figures(text: str) -> list[tuple[str, str, str | None]]:
    """``(number as written, record name, detail key or None)`` of every quoted figure."""
    return [(m["number"], m["name"], m["key"]) for m in QUOTE.finditer(text)]


def mismatches(text: str, records: dict[str, dict]) -> list[str]:
    """The quoted figures of ``text`` that are not their record's (or that name none)."""
    wrong = []
    for number, name, key in quoted_figures(text):
        entry = records.get(name)
        value = None if entry is None else (
            entry["figure"] if key is None else entry["details"].get(key))
        digits = len(number.partition(".")[2])
        if not isinstance(value, (int, float)) or round(float(value), digits) != float(number):
            wrong.append(f"{number} quoted from {name}{'/' + key if key else ''}: "
                         f"the record says {value!r}")
    return wrong


def test_every_result_file_a_page_names_exists():
    missing = [f"{page}: benchmarks/results/{name}.json"
               for page, text in _pages().items() for name in RESULT.findall(text)
               if not (Path(RESULTS) / f"{name}.json").is_file()]
    assert not missing, missing


def test_every_quoted_figure_is_its_records():
    records = _records()
    wrong = [f"{page}: {w}" for page, text in _pages().items() for w in mismatches(text, records)]
    assert not wrong, wrong


def test_a_stale_quote_is_caught():
    records = {"pass.cached": {"figure": 0.2986, "details": {"plain_s": 1.234}}}
    good = ("0.30x (`benchmarks/results/pass.cached.json`) and "
            "1.23 s (`benchmarks/results/pass.cached.json`, `plain_s`)")
    assert len(quoted_figures(good)) == 2 and mismatches(good, records) == []
    for stale in ("0.31x (`benchmarks/results/pass.cached.json`)",
                  "1.2 s (`benchmarks/results/pass.cached.json`, `floor_s`)",
                  "0.30x (`benchmarks/results/pass.first.json`)"):
        assert len(mismatches(stale, records)) == 1, stale


def test_every_result_file_is_quoted_or_has_a_stated_goal():
    # a record that no page quotes and whose table row has no goal backs nothing
    text = "\n".join(_pages().values())
    quoted = set(RESULT.findall(text))
    orphans = [name for name in _records() if name not in quoted and stated_goal(name) is None]
    assert not orphans, f"result files no page quotes, without a stated goal: {orphans}"


def test_every_record_names_a_script_that_exists():
    for name, entry in _records().items():
        script = entry["command"].split()[1]
        assert (ROOT / script).is_file(), (name, entry["command"])


def test_the_readme_maps_every_script_to_its_pages():
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("bench_*.py"))
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(bench_\w+\.py)` \|.*$",
                                                         readme, re.M)}
    assert sorted(rows) == scripts
    for script, row in rows.items():
        for page in re.findall(r"`((?:docs/[\w/.-]+|README)\.md)`", row):
            assert (ROOT / page).is_file(), (script, page)


def _named_scripts() -> list[str]:
    text = "\n".join(_pages().values())
    return sorted(set(SCRIPT.findall(text)) | {p.name for p in
                                               (ROOT / "benchmarks").glob("bench_*.py")})


def test_every_script_a_page_names_exists_and_parses_its_options():
    used = documented_options("\n".join(_pages().values()))
    for script in _named_scripts():
        path = ROOT / "benchmarks" / script
        assert path.is_file(), f"benchmarks/{script} is named by a page but does not exist"
        source = path.read_text()
        assert "ArgumentParser(" in source and '__name__ == "__main__"' in source, script
        # the options the pages' commands use are the script's (run: the slow test below)
        unknown = sorted(o for o in used.get(script, ()) if f'"{o}"' not in source)
        assert not unknown, f"benchmarks/{script}: the pages use options it does not have: {unknown}"


def documented_options(text: str) -> dict[str, set[str]]:
    """script -> the options its commands on a page use (``python benchmarks/X.py --opt``;
    a command may wrap across lines inside its backticks)."""
    found: dict[str, set[str]] = {}
    # a command ends at its closing backtick (or code fence), a comment or the next command
    flat = " ".join(text.split())
    for m in re.finditer(r"python benchmarks/(bench_\w+\.py)([^`#|]*?)(?=[`#|]|python |$)",
                         flat):
        found.setdefault(m.group(1), set()).update(
            w.partition("=")[0] for w in m.group(2).split() if w.startswith("--"))
    return found


def test_documented_options_are_read():
    text = ("`python benchmarks/bench_a.py --events 10 --only x`, `python\nbenchmarks/bench_b.py`"
            "\n```bash\npython benchmarks/bench_c.py --repeat 2  # --not-this\n"
            "python benchmarks/bench_c.py --events 5\n```\n")
    assert documented_options(text) == {"bench_a.py": {"--events", "--only"}, "bench_b.py": set(),
                                        "bench_c.py": {"--repeat", "--events"}}


@pytest.mark.slow  # a fresh process per script; some import JAX before parsing (~20-40 s in all)
@pytest.mark.parametrize("script", _named_scripts())
def test_every_script_answers_help_with_the_options_the_pages_use(script):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
    used = documented_options("\n".join(_pages().values())).get(script, set())
    unknown = sorted(o for o in used if not re.search(rf"{re.escape(o)}\b", done.stdout))
    assert not unknown, f"benchmarks/{script}: the pages use options it does not have: {unknown}"
