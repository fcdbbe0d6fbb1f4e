"""The benchmarks back the docs (issue 51): every figure a page quotes from a result file
is that file's figure (``benchmarks/quotes.py`` says how a page quotes one), every result
file and script a page names exists, every script parses the options the pages use, and no
result file is kept that neither a page quotes nor the table shows against a stated goal.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.quotes import pages, quotes, records, refresh, stale
from benchmarks.results_table import RESULTS, ROOT, stated_goal, write_quotes

RESULT = re.compile(r"benchmarks/results/([\w.]+)\.json")
SCRIPT = re.compile(r"benchmarks/(bench_\w+\.py)")


def _pages() -> dict[str, str]:
    return pages(ROOT)


def _records() -> dict[str, dict]:
    return records(RESULTS)


def test_every_result_file_a_page_names_exists():
    missing = [f"{page}: benchmarks/results/{name}.json"
               for page, text in _pages().items() for name in RESULT.findall(text)
               if not (Path(RESULTS) / f"{name}.json").is_file()]
    assert not missing, missing


def test_every_quoted_figure_is_its_records():
    entries = _records()
    wrong = [f"{page}: {w}" for page, text in _pages().items() for w in stale(text, entries)]
    assert not wrong, f"{wrong} (python benchmarks/results_table.py --write refreshes them)"


def test_a_stale_quote_is_caught_and_refreshed(tmp_path):
    entries = {"pass.cached": {"figure": 0.2986, "details": {"plain_s": 1.234}}}
    good = ("0.30x (`benchmarks/results/pass.cached.json`) and "
            "1.23 s (`benchmarks/results/pass.cached.json`, `plain_s`)")
    assert len(quotes(good)) == 2 and stale(good, entries) == []
    for wrong in ("0.31x (`benchmarks/results/pass.cached.json`)",
                  "0.31x\n(`benchmarks/results/pass.cached.json`)",  # wrapped at a line's end
                  "1.2 s (`benchmarks/results/pass.cached.json`, `floor_s`)",
                  "0.30x (`benchmarks/results/pass.first.json`)"):
        assert len(stale(wrong, entries)) == 1, wrong
    text, changes = refresh("was 0.4x (`benchmarks/results/pass.cached.json`), 1.3 s "
                            "(`benchmarks/results/pass.cached.json`, `plain_s`)", entries)
    assert text == ("was 0.3x (`benchmarks/results/pass.cached.json`), 1.2 s "
                    "(`benchmarks/results/pass.cached.json`, `plain_s`)")
    assert len(changes) == 2
    # results_table.py --write rewrites the pages in place
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "README.md").write_text("")
    (tmp_path / "benchmarks" / "README.md").write_text("")
    page = tmp_path / "docs" / "page.md"
    page.write_text("a 0.31x (`benchmarks/results/pass.cached.json`) pass\n")
    results = tmp_path / "results"
    results.mkdir()
    (results / "pass.cached.json").write_text('{"figure": 0.2986, "details": {}}')
    assert write_quotes(tmp_path, results) == [
        f"{page.relative_to(tmp_path)}: 0.31 -> 0.30 (pass.cached)"]
    assert page.read_text() == "a 0.30x (`benchmarks/results/pass.cached.json`) pass\n"


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
