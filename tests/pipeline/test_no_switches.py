"""No module-level switch changes the engine's behaviour (issue 32).

Which kernel or loop runs is an option of :class:`analysis.pipeline.backend.Backend`
(``fused``, ``value_loop``, ``scores_on_numba``, ``numba_reverse``), passed down as
keyword arguments; tests and benchmarks pass options instead of patching module globals.
Checked on the source (AST):

- the four globals that switched it (``fastkernel._FUSED``, ``fastkernel._VALUE_LOOP``,
  ``kernel._SCORES_ON_NUMBA``, ``fastreverse._ENABLED``) are named nowhere in
  ``analysis/`` or ``processors/``, and no module there binds an ALL-CAPS name to
  ``True`` or ``False`` at module level (the form a switch takes);
- no test or benchmark sets an ALL-CAPS module attribute (``monkeypatch.setattr(mod,
  "NAME", ...)``, ``setattr(...)`` or ``mod.NAME = ...``), except the constants listed in
  ``NOT_SWITCHES`` with the reason each is not a behaviour switch.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REMOVED = {"_FUSED", "_VALUE_LOOP", "_SCORES_ON_NUMBA", "_ENABLED"}
CAPS = re.compile(r"^_?[A-Z][A-Z0-9_]*$")
# ALL-CAPS module attributes that tests may set, and why they are no behaviour switch
NOT_SWITCHES = {
    # analysis.select.cuts' registry of cut kinds: a test registers a new kind
    "KINDS": "a registry extended by a test",
    # its op names, derived from KINDS at import: extended together with it
    "OPS": "a registry's names extended by a test",
    # analysis.pipeline.backends.numba.rules' registry of numba rules: a test registers one
    "RULES": "a registry extended by a test",
    # analysis.driver.files' cache directory of scikit-hep-testdata: a path
    "SKHEP_CACHE": "a cache directory",
    # numba's cache files: a test lowers it to make an
    # oversized file without writing 256 MiB
    "MAX_BYTES": "a size bound",
    # numba/_fastrevhist's events per block of the entries' kernel: a test lowers it to
    # show several blocks on 1 and 3 threads give the same bits
    "BLOCK": "a work-split size (the same bits for any value)",
    # numba/_revhistsums' tangent lanes per pass of the event sums' histograms: a test
    # lowers it to 1 to show more passes give the same gradient
    "TANGENTS": "a work-split size (the same gradient for any value)",
    # analysis._compat.numba's digests of the kernels' sources, read once per process: a
    # test empties it to read an edited source again, as a new process would
    "_DIGESTS": "an in-process cache",
    # analysis.stats._compiled's programs of this process: a test empties it
    "_PROGRAMS": "an in-process cache",
}


def _sources(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((REPO / f).rglob("*.py"))]


def _names(tree: ast.AST) -> set[str]:
    """Every identifier a module mentions: names, attributes, arguments, string constants."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.update(re.findall(r"\b_?[A-Z][A-Z0-9_]*\b", node.value))
    return out


def module_switches(tree: ast.Module) -> list[str]:
    """ALL-CAPS names bound to ``True``/``False`` at module level."""
    out = []
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        value = getattr(node, "value", None)
        if isinstance(value, ast.Constant) and isinstance(value.value, bool):
            out += [t.id for t in targets if isinstance(t, ast.Name) and CAPS.match(t.id)]
    return out


def patched_constants(tree: ast.AST) -> list[str]:
    """ALL-CAPS module attributes a test or benchmark sets: ``*.setattr(obj, "NAME", v)``,
    ``*.setattr("pkg.mod.NAME", v)``, ``setattr(obj, "NAME", v)``, ``obj.NAME = v``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name != "setattr" or not node.args:
                continue
            args = [a.value for a in node.args[:2]
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            out += [a.rsplit(".", 1)[-1] for a in args if CAPS.match(a.rsplit(".", 1)[-1])]
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and CAPS.match(sub.attr) and isinstance(
                            sub.ctx, ast.Store):
                        out.append(sub.attr)
    return out


def test_the_removed_switches_are_named_nowhere() -> None:
    found = {str(p.relative_to(REPO)): sorted(_names(ast.parse(p.read_text())) & REMOVED)
             for p in _sources("analysis", "processors")}
    assert not {k: v for k, v in found.items() if v}


def test_no_module_binds_a_boolean_switch() -> None:
    found = {str(p.relative_to(REPO)): module_switches(ast.parse(p.read_text()))
             for p in _sources("analysis", "processors")}
    assert not {k: v for k, v in found.items() if v}


def test_tests_and_benchmarks_pass_options_not_patch_constants() -> None:
    found = {str(p.relative_to(REPO)): sorted(set(patched_constants(ast.parse(p.read_text())))
                                              - set(NOT_SWITCHES))
             for p in _sources("tests", "benchmarks")}
    assert not {k: v for k, v in found.items() if v}


def test_the_checks_see_what_they_forbid() -> None:
    # each form once (the checks above pass on the repository, so they are shown failing here)
    src = ast.parse("_FUSED = True\nX: bool = False\nLIMIT = 3\n")
    assert module_switches(src) == ["_FUSED", "X"]
    assert _names(ast.parse("kernel._SCORES_ON_NUMBA\n")) & REMOVED == {"_SCORES_ON_NUMBA"}
    patched = ast.parse(
        'monkeypatch.setattr(fastkernel, "_FUSED", False)\n'
        'monkeypatch.setattr("analysis.pipeline.backends.numba.fastreverse._ENABLED", False)\n'
        'setattr(kernel, "_SCORES_ON_NUMBA", False)\n'
        "kernel._SCORES_ON_NUMBA = fastreverse._ENABLED = True\n"
        'monkeypatch.setattr(fastreverse, "_shares", f)\n'
        "ev.run_pullback = f\n")
    assert sorted(patched_constants(patched)) == sorted(
        ["_FUSED", "_ENABLED", "_SCORES_ON_NUMBA", "_SCORES_ON_NUMBA", "_ENABLED"])
