"""analysis.runtime.environment: every environment variable the package reads, read in one place.

References: the environment given (each field against the variable it names), the one
line of a bad value, and the source itself (no module outside analysis/runtime/environment.py
reads a variable of this package or of JAX, numba, XLA or XDG).
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from analysis import runtime
from analysis.cli.parser import main
from analysis.errors import ConfigError
from analysis.runtime.environment import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "environment.md"


def test_defaults_and_each_variable():
    home = Settings.from_environ({"HOME": "/h"})
    assert home == Settings(cache_home=home.cache_home)  # every other field its default
    env = {"DIFFCOFFEA_JAX_CACHE": "/c", "JAX_COMPILATION_CACHE_DIR": "/j",
           "XDG_CACHE_HOME": "/x", "DIFFCOFFEA_MEMORY_LIMIT_MB": "512",
           "DIFFCOFFEA_KERNEL_THREADS": "3",
           "DIFFCOFFEA_MALLOC": "Off", "DIFFCOFFEA_GC_FREEZE": "no"}
    assert Settings.from_environ(env) == Settings(
        jax_cache="/c", jax_compilation_cache_dir="/j", cache_home="/x", memory_limit_mb=512.0,
        kernel_threads=3, malloc=False, gc_freeze=False)


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("DIFFCOFFEA_KERNEL_THREADS", "many", "a positive integer"),
    ("DIFFCOFFEA_KERNEL_THREADS", "0", "a positive integer"),
    ("DIFFCOFFEA_MEMORY_LIMIT_MB", "nan", "a positive number of megabytes"),
    ("DIFFCOFFEA_MEMORY_LIMIT_MB", "-5", "a positive number of megabytes"),
])
def test_a_bad_value_is_one_line(name, value, expected):
    with pytest.raises(ConfigError, match=rf"^{name}={value!r}: expected {expected}$"):
        Settings.from_environ({name: value})


def test_read_once_until_configured_or_reset(monkeypatch):
    monkeypatch.setenv("DIFFCOFFEA_KERNEL_THREADS", "2")
    assert runtime.settings().kernel_threads == 2
    monkeypatch.setenv("DIFFCOFFEA_KERNEL_THREADS", "5")
    assert runtime.settings().kernel_threads == 2  # read once
    runtime.reset()
    assert runtime.settings().kernel_threads == 5


def test_the_command_line_names_a_bad_variable_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("DIFFCOFFEA_KERNEL_THREADS", "lots")
    assert main(["evaluate", str(ROOT / "configs" / "demo.yaml"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["diffcoffea: error: DIFFCOFFEA_KERNEL_THREADS='lots': expected a positive integer"]


_READ = re.compile(r"""(?:os\.environ\.get|os\.getenv|os\.environ\[|environ\.get)\(?\s*["']"""
                   r"""((?:DIFFCOFFEA|JAX|NUMBA|XLA|XDG)_[A-Z0-9_]+)["']\s*[,)\]](?!\s*=[^=])""")


def test_no_module_but_settings_reads_a_variable():
    readers = {}
    for folder in ("analysis", "processors"):
        for path in (ROOT / folder).rglob("*.py"):
            names = _READ.findall(path.read_text())
            if names:
                readers[str(path.relative_to(ROOT))] = sorted(set(names))
    # (Settings.from_environ reads its mapping argument, os.environ by default)
    assert readers == {}, readers


def test_every_field_is_on_the_page():
    page = PAGE.read_text()
    for field in fields(Settings):
        assert f"`{field.name}`" in page, field.name
