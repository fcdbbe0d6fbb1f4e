"""The docs name only modules that exist: docs/development.md's layer map (a file name in
a layer's row is a file of that layer's package) and every repository path in any page.

A page that names ``pipeline/kernel.py`` after it was split, or a map row that keeps a
module the package no longer has, fails here with the page, the line and the path.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_TICKED = re.compile(r"`([A-Za-z0-9_./-]+\.py)`")
_ROOTS = ("analysis/", "processors/", "tests/", "benchmarks/", "scripts/", "examples/", ".ci/")


def _rows() -> list[tuple[int, str, str]]:
    """``(line, package, text)`` of each row of the layer table of docs/development.md."""
    rows = []
    text = (REPO / "docs" / "development.md").read_text().splitlines()
    for n, line in enumerate(text, 1):
        m = re.match(r"\| \d+ \| `([a-z_/]+)`([^|]*)\|(.*)\|\s*$", line)
        if m:
            rows.append((n, m.group(1).rstrip("/"), m.group(2) + m.group(3)))
    return rows


def test_the_layer_map_has_every_package():
    packages = {p for _, p, _ in _rows()}
    have = {str(d.parent.relative_to(REPO)) for d in (REPO / "analysis").glob("*/__init__.py")}
    assert have, "no package found"
    assert sorted(have - packages) == [], "packages missing from docs/development.md's map"
    assert "processors" in packages


def test_every_module_of_the_layer_map_exists():
    missing = []
    for n, package, text in _rows():
        root = REPO / package
        for name in _TICKED.findall(text):
            if name.startswith(_ROOTS):
                found = (REPO / name).is_file()
            elif "/" in name:  # relative to the layer's package (backends/jax/passes.py)
                found = (root / name).is_file() or any(root.rglob(name))
            else:  # a file of the layer's package, in any of its folders
                found = (root.with_suffix(".py").is_file() and root.name + ".py" == name) or any(
                    root.rglob(name))
            if not found:
                missing.append(f"docs/development.md:{n}: {name} (layer {package})")
    assert not missing, "\n".join(missing)


def test_every_repository_path_a_page_names_exists():
    missing = []
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for path in re.findall(r"`([A-Za-z0-9_./-]+\.py)`", line):
                if path.startswith(_ROOTS) and not (REPO / path).is_file():
                    missing.append(f"{page.relative_to(REPO)}:{n}: {path}")
    assert not missing, "\n".join(missing)


def test_every_docs_page_the_code_names_exists():
    """A comment or docstring that sends the reader to a page under ``docs/`` names one that
    exists (pages are merged: one per question)."""
    missing = []
    for root in ("analysis", "processors", "tests", "benchmarks", "scripts", "examples"):
        for src in sorted((REPO / root).rglob("*.py")):
            for n, line in enumerate(src.read_text().splitlines(), 1):
                for page in re.findall(r"docs/[A-Za-z0-9_./-]+\.md", line):
                    if not (REPO / page).is_file():
                        missing.append(f"{src.relative_to(REPO)}:{n}: {page}")
    assert not missing, "\n".join(missing)
