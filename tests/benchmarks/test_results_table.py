"""The benchmark table's commands are ones anyone can run from the repository root."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.results_table import RESULTS, ROOT, command_line


def test_a_scratch_folder_of_one_machine_is_left_out(tmp_path):
    script = str(ROOT / "benchmarks" / "bench_backends.py")
    got = command_line(script, ["--data-dir", str(tmp_path), "--repeat", "5",
                                f"--out={tmp_path / 'x'}"])
    assert got == "python benchmarks/bench_backends.py --repeat 5"


def test_relative_and_in_repository_paths_are_kept():
    script = str(ROOT / "benchmarks" / "bench_pass.py")
    inside = str(ROOT / "configs" / "demo.yaml")
    got = command_line(script, ["--config", inside, "--data-dir", "data/generated/x"])
    assert got == f"python benchmarks/bench_pass.py --config {inside} --data-dir data/generated/x"


def test_no_recorded_command_names_a_path_outside_the_repository():
    for path in sorted(Path(RESULTS).glob("*.json")):
        command = json.loads(path.read_text())["command"]
        words = command.split()
        assert words[:2] == ["python", f"benchmarks/{words[1].rpartition('/')[2]}"], path.name
        for word in words[2:]:
            value = word.partition("=")[2] or word
            assert not (value.startswith("/") and not value.startswith(str(ROOT))), (
                f"{path.name}: {command}")


def _row(table: str, name: str) -> list[str]:
    line = next(r for r in table.splitlines() if r.startswith(f"| `{name}` |"))
    return [cell.strip() for cell in line.split("|")[1:-1]]


def test_the_table_shows_only_stated_goals(tmp_path):
    # a goal a script set itself is not shown; a bound an issue tightened replaces the one
    # recorded before it (issue 51: "the table shows goals that the docs or an issue state")
    from benchmarks.results_table import record, render

    record("pass.cached_floor", compares="cached / floor", figure=4.7, goal="<= 4.0x",
           met=False, command="python benchmarks/bench_pass.py", directory=tmp_path)
    record("pass.step_floor", compares="step / floor", figure=3.5, goal="<= 4.0x",
           met=True, command="python benchmarks/bench_pass.py", directory=tmp_path)
    table = render(tmp_path)
    assert _row(table, "pass.cached_floor")[2:5] == ["-", "4.70x", "-"]
    assert _row(table, "pass.step_floor")[2:5] == ["<= 3x (issue 49)", "3.50x", "**not met**"]


def test_every_stated_goal_has_a_source_and_a_record():
    import fnmatch
    import re

    from benchmarks.results_table import GOALS

    names = [json.loads(p.read_text())["name"] for p in sorted(Path(RESULTS).glob("*.json"))]
    for pattern, (goal, source) in GOALS.items():
        assert re.fullmatch(r"(<=|>=) [0-9.]+ ?(x|s)", goal), (pattern, goal)
        assert re.fullmatch(r"issue \d+", source) or (ROOT / source).is_file(), (pattern, source)
        assert any(fnmatch.fnmatchcase(n, pattern) for n in names), f"{pattern}: no record"
