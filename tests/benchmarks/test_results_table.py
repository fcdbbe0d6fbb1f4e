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
