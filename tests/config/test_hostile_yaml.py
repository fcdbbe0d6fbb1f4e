"""Hostile YAML: duplicate keys, alias bombs, recursion, deep nesting, any UTF-8 name.

The one config loader (:func:`analysis.config.loader.load_config`) refuses each with one
line naming the file and the line, fast and with bounded memory; legitimate aliases
and merge keys still work.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from analysis.cli.parser import main
from analysis.config.loader import ConfigError, load_config

# The classic "billion laughs": 9 levels of 9 aliases, ~3.9e8 strings once expanded.
BOMB = "".join(
    f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" if p else f"{c}: &{c} [{','.join(['lol'] * 9)}]\n"
    for p, c in zip(["", *"abcdefgh"], "abcdefghi")
)

DATASET = "{files: x.root}"


def _load(tmp_path: Path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(path))
    return msg


def test_duplicate_key_is_an_error_with_its_line(tmp_path):
    text = f"datasets:\n  ttbar: {DATASET}\n  dy: {DATASET}\n  ttbar: {{files: y.root}}\n"
    msg = _load(tmp_path, text)
    assert "line 4" in msg and "duplicate key 'ttbar'" in msg and "first at line 2" in msg


def test_duplicate_key_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(f"datasets:\n  a: {DATASET}\nlumi: 1\nlumi: 2\n")
    assert main(["evaluate", str(path), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 4" in err and "duplicate key 'lumi'" in err


def test_merge_keys_and_aliases_still_work(tmp_path):
    """Keys merged from an alias may be overridden: that is YAML, not a duplicate."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "datasets:\n  a: &ds {files: a.root, weight: genWeight}\n  b: {<<: *ds, weight: w}\n"
    )
    cfg = load_config(path)
    assert cfg.datasets["b"].weight == "w" and cfg.datasets["b"].files == ["a.root"]
    assert cfg.datasets["a"].weight == "genWeight"


def test_alias_bomb_fails_fast_with_bounded_memory(tmp_path):
    assert len(BOMB.encode()) < 400
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ConfigError, match="alias") as info:
            load_config(path)
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 0.5, elapsed
    assert peak < 20e6, peak
    assert "line" in str(info.value) and len(str(info.value)) < 300


def test_bomb_inside_a_valid_key_is_refused_too(tmp_path):
    """Shared structure under a real key (so the schema would walk it) is refused as well."""
    body = BOMB.replace("i: &i", "bomb: &i")
    text = body + f"datasets:\n  a: {DATASET}\noptimizer:\n  kwargs: {{x: *i}}\n"
    start = time.perf_counter()
    assert "alias" in _load(tmp_path, text)
    assert time.perf_counter() - start < 0.5


def test_recursive_alias_and_deep_nesting(tmp_path):
    assert "recursive alias" in _load(tmp_path, "a: &a [*a]\n")
    assert "nested" in _load(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n")


def test_error_formatter_never_expands_values(tmp_path):
    """A wrong-typed value that is a large shared structure prints a bounded excerpt."""
    row = "[" + ",".join(["lolololol"] * 200) + "]"
    text = f"datasets:\n  a: {DATASET}\nlumi: [&x {row}, " + ",".join(["*x"] * 199) + "]\n"
    start = time.perf_counter()
    msg = _load(tmp_path, text)  # 40k strings: under the node limit, so the schema sees it
    assert time.perf_counter() - start < 0.5
    assert msg.startswith(f"{tmp_path / 'c.yaml'}: lumi: expected a number")
    assert len(msg) < 250


@pytest.mark.parametrize("name", ["tt̄→ℓℓ", "日本語データ", "émoji😀", "ümlaut.root"])
def test_any_utf8_dataset_name_loads(tmp_path, name):
    path = tmp_path / "c.yaml"
    path.write_text(f'datasets:\n  "{name}": {{files: "{name}.root"}}\n', encoding="utf-8")
    cfg = load_config(path)
    assert list(cfg.datasets) == [name]
    assert cfg.datasets[name].files == [f"{name}.root"]


@pytest.mark.parametrize("name", ["émoji 😀", "Ελληνικά/ρ", "a\u00a0b"])
def test_dataset_name_with_a_separator_is_refused(tmp_path, name):
    """Whitespace and ``/`` break the file names, ROOT keys and datacard tokens a dataset
    name becomes (analysis.config.names; issue 54)."""
    path = tmp_path / "c.yaml"
    path.write_text(f'datasets:\n  "{name}": {{files: "x.root"}}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="datasets: dataset name .* is not allowed"):
        load_config(path)


def test_value_excerpt_is_bounded_for_shared_structures():
    """The formatter's excerpt of a value never walks all of a shared (aliased) structure."""
    from analysis.config.yamlsafe import show_value as _show
    value: list = ["lol"] * 9
    for _ in range(6):
        value = [value] * 9  # 4.8e6 strings if expanded (a plain repr takes seconds)
    start = time.perf_counter()
    text = _show(value)
    # a bound, not a speed: expanding takes seconds; a loaded CI worker can pause ~0.1 s
    assert time.perf_counter() - start < 0.5
    assert len(text) <= 60 and text.startswith("[[")


def test_endless_config_file_is_refused(tmp_path):
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="/dev/zero: config file is a device"):
        load_config("/dev/zero")
    assert time.perf_counter() - start < 1.0
    path = tmp_path / "crlf.yaml"
    path.write_bytes(b"datasets:\r\n  a: {files: a.root}\r\n")  # Windows line ends still load
    assert list(load_config(path).datasets) == ["a"]
