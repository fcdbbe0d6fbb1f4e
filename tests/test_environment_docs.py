"""docs/guide/environment.md lists every environment variable the package, its tests and
its benchmarks name (and names none that nothing reads or writes)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "guide" / "environment.md"
# The variables of this package and of the libraries whose settings it reads or writes.
_NAME = re.compile(r"\b((?:DIFFCOFFEA|JAX|NUMBA|XLA|XDG)_[A-Z0-9_]*[A-Z0-9*])")


def _named_in_code() -> set[str]:
    names: set[str] = set()
    for folder in ("analysis", "processors", "tests", "benchmarks"):
        for path in (REPO / folder).rglob("*.py"):
            for literal in re.findall(r"[\"']([A-Z][A-Z0-9_]+)[\"']", path.read_text()):
                if _NAME.fullmatch(literal) and literal != "JAX_PERSISTENT_CACHE_MIN_":
                    names.add(literal)
    return names


def _on_the_page() -> set[str]:
    return set(_NAME.findall(PAGE.read_text()))


def _covered(name: str, page: set[str]) -> bool:
    """On the page, under a ``PREFIX_*`` entry, or a prefix the code matches names by
    (``key.startswith("JAX_PERSISTENT_CACHE")``) of a variable on the page."""
    return (name in page or any(p.endswith("*") and name.startswith(p[:-1]) for p in page)
            or any(p.startswith(name + "_") for p in page))


def test_every_variable_the_code_names_is_on_the_page():
    named, page = _named_in_code(), _on_the_page()
    assert {"DIFFCOFFEA_JAX_CACHE", "DIFFCOFFEA_KERNEL_THREADS", "JAX_ENABLE_X64"} <= named
    assert sorted(n for n in named if not _covered(n, page)) == []


def test_every_variable_on_the_page_is_named_in_the_code():
    stale = {n for n in _on_the_page() - _named_in_code() if not n.endswith("*")}
    assert sorted(stale) == []
