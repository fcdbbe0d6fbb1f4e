"""The processor takes one argument, its pass's Job, and nothing is set on it afterwards
(issue 32): the driver builds Jobs and Requests; other reading options are another
processor of the same prepared pass (``DiffProcessor.reading``). Checked on the source
(AST) and by use; the checks are shown failing on planted code."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

from analysis.config.loader import load_config
from analysis.pipeline.job import Job
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.pipeline.request import Request
from processors import DiffProcessor

REPO = Path(__file__).resolve().parents[2]


def processor_stores(tree: ast.AST) -> list[str]:
    """``name.attr`` of every attribute store on a name starting with ``proc``."""
    return [f"{t.value.id}.{t.attr}" for node in ast.walk(tree)
            for t in (node.targets if isinstance(node, ast.Assign) else
                      [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in ast.walk(t)
            if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)
            and isinstance(t.value, ast.Name) and t.value.id.startswith("proc")]


def self_stores_outside_init(tree: ast.AST) -> list[str]:
    """Methods of a class that set an attribute of ``self`` (``__init__`` may)."""
    out = []
    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        for fn in [n for n in cls.body if isinstance(n, ast.FunctionDef)]:
            if fn.name == "__init__":
                continue
            for node in ast.walk(fn):
                if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                        and isinstance(node.value, ast.Name) and node.value.id == "self"):
                    out.append(f"{fn.name}: self.{node.attr}")
    return out


def test_the_driver_sets_nothing_on_a_processor():
    found = {str(p.relative_to(REPO)): processor_stores(ast.parse(p.read_text()))
             for p in sorted((REPO / "analysis" / "driver").rglob("*.py"))}
    assert not {k: v for k, v in found.items() if v}
    source = ast.parse((REPO / "processors" / "diff_processor.py").read_text())
    assert not self_stores_outside_init(source)


def test_the_checks_see_what_they_forbid():
    planted = ast.parse("proc.keep_columns = True\nproc.a, proc.b = 1, 2\nx.y = 3\n")
    assert processor_stores(planted) == ["proc.keep_columns", "proc.a", "proc.b"]
    cls = ast.parse("class P:\n    def __init__(self):\n        self.a = 1\n"
                    "    def go(self):\n        self.b = 2\n")
    assert self_stores_outside_init(cls) == ["go: self.b"]


def test_one_argument_and_reading_options_make_another_processor():
    assert list(inspect.signature(DiffProcessor).parameters) == ["job"]
    config = load_config(REPO / "configs" / "ttbar.yaml")
    plan = build_plan(config)
    theta = [config.parameters[n].init for n in plan.param_names]
    proc = DiffProcessor(Job(plan, Request(theta, initial_widths(config), order=1),
                             {"ttbar": "genWeight"}))
    other = proc.reading(keep_columns=True, kernel_threads=1)
    assert other is not proc and other.prepared is proc.prepared
    assert not proc.job.keep_columns and proc.job.kernel_threads is None
    assert other.job.keep_columns and other.job.kernel_threads == 1
    with pytest.raises(TypeError, match="not reading options: plan"):
        proc.reading(plan=plan)
    with pytest.raises(ValueError, match="a request computes one thing, got grid, selected"):
        Request(np.zeros(3), np.zeros(3), order=0, grid=True, selected=True)
    with pytest.raises(ValueError, match="pullback are computed at order 0"):
        Request(np.zeros(3), np.zeros(3), order=1, pullback=[None])
