"""The docs cannot rot: API reference complete, examples run, benchmark table current.

- every public name (the ``__all__`` of the documented modules) has an autodoc entry in
  ``docs/api/`` (and nothing there names a name that is not public);
- every python example in README.md and docs/ runs: the blocks of one page run in order
  in one fresh interpreter from a scratch copy of the repository root (its folders
  linked, ``../shared/data`` beside it), so that what they write stays temporary;
  a block whose first line is ``# in analysis/...py`` (or ``# analysis/...py``) is a
  fragment to paste into that file: it must compile and the file must exist;
- every ``configs/``, ``examples/`` and ``benchmarks/`` path a page names exists;
- benchmarks/README.md shows the table that ``benchmarks/results_table.py`` makes from
  the result files.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.opt_helpers import cli_env

ROOT = Path(__file__).resolve().parents[1]
API_MODULES = {
    "stats": "analysis.stats",
    "soft": "analysis.soft",
    "testing": "analysis.testing",
    "likelihood": "analysis.likelihood",
    "processors": "processors",
}
FRAGMENT = re.compile(r"#\s*(?:in\s+)?((?:analysis|processors)/[\w/]+\.py)")
# Pages whose examples need a whole chunked pass with eager JAX (tens of seconds each).
SLOW_PAGES = {"README.md", "docs/guide/own-processor.md", "docs/guide/likelihood.md",
              "docs/guide/export.md"}


def pages() -> list[Path]:
    docs = [
        p for p in sorted((ROOT / "docs").rglob("*.md"))
        if "_build" not in p.parts and "_generated" not in p.parts
    ]
    return [ROOT / "README.md", *docs]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), flags=re.S | re.M)


def test_api_reference_lists_every_public_name():
    for page, modname in API_MODULES.items():
        text = (ROOT / "docs" / "api" / f"{page}.md").read_text()
        listed = set(re.findall(rf"\.\. auto(?:function|class|data):: {re.escape(modname)}\.(\w+)", text))
        public = set(importlib.import_module(modname).__all__)
        assert listed == public, (
            f"docs/api/{page}.md: missing {sorted(public - listed)}, not public {sorted(listed - public)}"
        )


def _documented() -> set[str]:
    """Every dotted name an autodoc directive of docs/api/ names."""
    return {m for page in (ROOT / "docs" / "api").glob("*.md")
            for m in re.findall(r"\.\. auto\w+:: ([\w.]+)", page.read_text())}


def guide_names() -> dict[str, str]:
    """``{dotted name: page}`` of every ``analysis.*`` / ``processors.*`` name a page's
    python code imports (fragments to paste into the package aside) or its text calls
    (`` `analysis.x.f(...)` ``)."""
    import ast

    out: dict[str, str] = {}
    for path in pages():
        text = path.read_text()
        for block in python_blocks(path):
            if FRAGMENT.match(block.lstrip()):
                continue
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
                    for alias in node.names:
                        out.setdefault(f"{node.module}.{alias.name}", _page_id(path))
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.split(".")[0] in PACKAGES:
                            out.setdefault(alias.name, _page_id(path))
        for name in re.findall(r"`((?:analysis|processors)\.[\w.]+)\(", text):
            out.setdefault(name, _page_id(path))
    return out


PACKAGES = ("analysis", "processors")


def test_every_name_the_guides_use_is_in_the_api_reference():
    documented = _documented()
    missing = {n: page for n, page in guide_names().items() if n not in documented}
    assert not missing, f"not in docs/api/: {missing}"


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _runnable_pages():
    out = []
    for path in pages():
        blocks = [b for b in python_blocks(path) if not FRAGMENT.match(b.lstrip())]
        if blocks:
            rel = _page_id(path)
            marks = [pytest.mark.slow] if rel in SLOW_PAGES else []
            out.append(pytest.param(rel, "\n".join(blocks), id=rel, marks=marks))
    return out


def _scratch_root(tmp_path: Path, shared_data: Path) -> Path:
    """A folder that looks like the repository root to an example (its configs, examples,
    benchmarks and ../shared/data), so that what an example writes (results/, generated
    data) lands under ``tmp_path``, never in the checkout."""
    work = tmp_path / "root"
    work.mkdir()
    for name in ("configs", "examples", "benchmarks", "analysis", "processors"):
        (work / name).symlink_to(ROOT / name)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(shared_data)
    return work


@pytest.mark.parametrize(("page", "code"), _runnable_pages())
def test_examples_run(page, code, tmp_path, shared_data):
    script = tmp_path / "example.py"
    script.write_text(code)
    env = cli_env()
    done = subprocess.run(
        [sys.executable, str(script)], cwd=_scratch_root(tmp_path, shared_data), env=env,
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, f"{page}: its python examples fail:\n{done.stderr[-3000:]}"


def test_fragments_compile_and_name_real_files():
    for path in pages():
        for block in python_blocks(path):
            m = FRAGMENT.match(block.lstrip())
            if m:
                assert (ROOT / m.group(1)).is_file(), f"{_page_id(path)}: no file {m.group(1)}"
                compile(block, f"{_page_id(path)}:{m.group(1)}", "exec")


def test_named_paths_exist():
    pattern = re.compile(r"(?<![\w/.])((?:configs|examples|benchmarks)/[\w./-]+\.(?:yaml|py|md))")
    for path in pages():
        for name in pattern.findall(path.read_text()):
            assert (ROOT / name).exists(), f"{_page_id(path)} names {name}, which does not exist"


def test_benchmark_table_is_current():
    from benchmarks import results_table
    text = (ROOT / "benchmarks" / "README.md").read_text()
    a, b = text.index(results_table.BEGIN), text.index(results_table.END)
    shown = text[a + len(results_table.BEGIN): b].strip()
    assert shown == results_table.render().strip(), (
        "benchmarks/README.md: the table is stale; run python benchmarks/results_table.py --write"
    )


def test_public_docstrings_have_parameters_and_returns():
    """numpy style, as the API reference renders them (napoleon)."""
    import inspect

    missing = []
    for modname in API_MODULES.values():
        module = importlib.import_module(modname)
        for name in module.__all__:
            obj = getattr(module, name)
            doc = inspect.getdoc(obj) or ""
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and "Parameters\n---" not in doc:
                missing.append(f"{modname}.{name}: Parameters")
            if inspect.isfunction(obj) and "Returns\n---" not in doc:
                missing.append(f"{modname}.{name}: Returns")
    assert not missing, missing


def test_generated_branches_are_the_documented_ones(tmp_path):
    """docs/guide/yaml.md lists every branch of a generated file, and no other (a user
    writing a lepton selection for generated data learns there that it has none)."""
    import uproot

    from analysis.data.generate import write_dataset

    text = (ROOT / "docs" / "guide" / "yaml.md").read_text()
    bullet = text.split("- **Generated files**", 1)[1].split("They have no leptons", 1)[0]
    documented = re.findall(r"`(\w+)`", bullet.split("branches only:", 1)[1])
    for process in ("ttbar", "dy"):
        (path,) = write_dataset(tmp_path / process, process=process, n_events=20, seed=3)
        with uproot.open(path) as f:
            assert sorted(f["Events"].keys()) == sorted(documented), process
