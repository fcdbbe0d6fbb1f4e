"""Sphinx configuration: MyST markdown pages, API reference from docstrings (numpy style).

Build from the repository root: ``sphinx-build -W -b html docs docs/_build/html``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import results_table  # noqa: E402

project = "diffcoffea"
author = "the diffcoffea developers"
copyright = "2026, the diffcoffea developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_generated/README.md"]
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": False, "undoc-members": False}
napoleon_google_docstring = False
napoleon_numpy_docstring = True

html_theme = "furo"
html_title = "diffcoffea"

# The benchmarks page shows the table made from the result files the benchmark scripts
# write (benchmarks/results/*.json), made anew at every build: figures are never typed.
_generated = Path(__file__).parent / "_generated"
_generated.mkdir(exist_ok=True)
(_generated / "benchmarks_table.md").write_text(results_table.render(ROOT / "benchmarks" / "results"))
