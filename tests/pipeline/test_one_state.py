"""One chunk state (issue 32): every backend's states are built by one constructor,
:func:`analysis.pipeline.results.state_tree`, and merge exactly by ``+``.

- no module of ``analysis/`` or ``processors/`` but ``analysis/pipeline/results.py``
  writes a dict literal of state keys (``selected_sumw``, ``selected_sumw2``; or the
  histogram groups ``histograms`` and ``templates`` together) or stores into one of the
  yields by its key (checked on the source, AST; the check is shown failing on planted
  code);
- every mergeable state type (a class with ``__add__``: ``DatasetState``, the
  bootstrap's sums, ``Derived``, ...) has one constructor, its ``__init__``: no
  classmethod or staticmethod builds one (JAX's pytree protocol ``tree_unflatten``
  aside), checked on the source (AST; shown failing on planted code), and the state
  of a chunk of no events is the merge's neutral element, exactly;
- the numba and JAX backends return the same state tree (the same keys and leaf
  types) for a plan with observables, histograms and templates, and two chunks add to
  the whole, leaf for leaf (``DatasetState.__add__``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import jax
import numpy as np
import yaml

from analysis.config.loader import config_from_dict
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.pipeline.results import statistics
from analysis.stats.merge import is_state
from tests.chunked_helpers import read_columns, slice_columns

REPO = Path(__file__).resolve().parents[2]
STATE_MODULE = REPO / "analysis" / "pipeline" / "results.py"
YIELD_KEYS = {"selected_sumw", "selected_sumw2"}
HIST_GROUPS = {"histograms", "templates"}


def state_literals(tree: ast.AST) -> list[int]:
    """Lines of dict literals of state keys and of stores into a yield by its key."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if keys & YIELD_KEYS or HIST_GROUPS <= keys:
                out.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "dict":
            if {kw.arg for kw in node.keywords} & YIELD_KEYS:
                out.append(node.lineno)
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
              and isinstance(node.slice, ast.Constant) and node.slice.value in YIELD_KEYS):
            out.append(node.lineno)
    return out


def _scan(check, skip: Path | None = None) -> dict:
    """``{path: check(its AST)}`` of every module of analysis/ and processors/ where the
    check finds something (``skip``: a module left out)."""
    found = {}
    for folder in ("analysis", "processors"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path != skip and (hits := check(ast.parse(path.read_text(encoding="utf-8")))):
                found[str(path.relative_to(REPO))] = hits
    return found


def test_no_state_literal_outside_the_state_module() -> None:
    found = _scan(state_literals, skip=STATE_MODULE)
    assert not found, f"build states with analysis.pipeline.results.state_tree: {found}"


def test_the_check_sees_state_literals() -> None:
    src = ast.parse('v = {"selected_sumw": 1.0, "observables": {}}\n'
                    'v["selected_sumw2"] = 2.0\n'
                    'h = {"histograms": {}, "templates": {}}\n'
                    'd = dict(selected_sumw=1.0)\n'
                    'ok = {"observables": {}, "x": v["selected_sumw"]}\n')
    assert state_literals(src) == [1, 2, 3, 4]
    assert state_literals(ast.parse(STATE_MODULE.read_text())), "the constructor is seen"


#: the one classmethod a state type may have: JAX's pytree protocol rebuilds its leaves
PYTREE = {"tree_unflatten"}


def other_constructors(tree: ast.AST) -> list[str]:
    """``Class.method`` of every classmethod or staticmethod of a class with ``__add__``
    (a mergeable state type) but :data:`PYTREE`: another way to build one."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if "__add__" not in {m.name for m in methods}:
            continue
        out += [f"{node.name}.{m.name}" for m in methods if m.name not in PYTREE and any(
            getattr(d, "id", "") in ("classmethod", "staticmethod") for d in m.decorator_list)]
        out += [f"{node.name}.__new__" for m in methods if m.name == "__new__"]
    return out


def test_every_state_type_has_one_constructor() -> None:
    found = _scan(other_constructors)
    assert not found, f"build a state with its class's __init__ only: {found}"


def test_the_check_sees_a_second_constructor() -> None:
    src = ast.parse("class S:\n"
                    "    def __init__(self, *, x): self.x = x\n"
                    "    def __add__(self, o): return S(x=self.x + o.x)\n"
                    "    @classmethod\n"
                    "    def from_chunk(cls, x): return cls(x=x)\n"
                    "    @classmethod\n"
                    "    def tree_unflatten(cls, aux, leaves): return cls(x=leaves[0])\n"
                    "class NotAState:\n"
                    "    @staticmethod\n"
                    "    def make(): return NotAState()\n")
    assert other_constructors(src) == ["S.from_chunk"]


def _config() -> dict:
    data = yaml.safe_load((REPO / "configs" / "ttbar.yaml").read_text())
    data["histograms"] = [{"name": "jpt", "x": "Jet.pt", "edges": [0, 50, 100, 200]}]
    data["likelihood"] = {"channels": {"sr": {"histogram": "jpt"}}}
    return data


def _leaves(tree) -> dict:
    paths = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_state)[0]
    return {jax.tree_util.keystr(p): leaf for p, leaf in paths}


def test_both_backends_return_one_state_that_merges_by_addition(shared_data) -> None:
    config = config_from_dict(_config())
    plan = build_plan(config)
    theta = np.array([config.parameters[n].init for n in plan.param_names])
    widths = np.asarray(initial_widths(config))
    cols = read_columns(shared_data / "nanoAOD_2015_CMS_Open_Data_ttbar.root", plan)
    states = {b: chunk_state(cols, plan, theta, widths, order=1, backend=b)
              for b in ("numba", "jax")}
    trees = {b: _leaves(st.derived.value) for b, st in states.items()}
    assert trees["numba"].keys() == trees["jax"].keys()
    for key in ("['histograms']['jpt']", "['templates']['sr']", "['selected_sumw']"):
        assert any(k.startswith(key) for k in trees["numba"]), key
    for key, leaf in trees["numba"].items():
        assert type(leaf) is type(trees["jax"][key]), key
    # two chunks merge into the whole: the statistics and histograms (the order of the
    # sums differs: 1e-12)
    half = cols.n_events // 2
    parts = [chunk_state(c, plan, theta, widths, order=1, backend="numba")
             for c in (slice_columns(cols, 0, half), slice_columns(cols, half, cols.n_events))]

    def summary(state) -> dict:
        value = state.derived.value
        return _leaves({"stats": statistics(value, plan), "h": value["histograms"],
                        "t": value["templates"]})

    merged, whole = summary(parts[0] + parts[1]), summary(states["numba"])
    assert merged.keys() == whole.keys() and len(whole) > 10
    for key, leaf in whole.items():
        np.testing.assert_allclose(np.asarray(merged[key]), np.asarray(leaf), rtol=1e-12,
                                   atol=1e-12, err_msg=key)
    # the state of a chunk of no events (the driver's empty dataset) is the neutral
    # element of the merge, exactly
    from analysis.driver.runner import empty_state

    empty = empty_state(plan, theta, widths, 1)
    assert (empty.events, empty.sumw) == (0, 0.0)
    for total in (empty + parts[0], parts[0] + empty):
        assert (total.events, total.sumw, total.chunks) == (
            parts[0].events, parts[0].sumw, parts[0].chunks + empty.chunks)
        a, b = _leaves(total.derived.value), _leaves(parts[0].derived.value)
        assert a.keys() == b.keys()
        for key, leaf in b.items():
            for x, y in zip(jax.tree_util.tree_leaves(a[key]), jax.tree_util.tree_leaves(leaf)):
                assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True), key
