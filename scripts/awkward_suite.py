"""Run awkward's own tests of its statistics with ``analysis.stats`` substituted.

Usage::

    git -C <awkward.git> archive HEAD tests | tar -x -C /tmp/ak
    PYTHONPATH=$PWD python scripts/awkward_suite.py /tmp/ak/tests [-k EXPR] [-v]

``ak.mean``, ``ak.var``, ``ak.std``, ``ak.moment``, ``ak.covar``, ``ak.corr`` and
``ak.linear_fit`` (also as ``ak.operations.*``, in their modules, and behind
``np.mean`` etc.) are replaced by ours for the whole session, collection included (so
functions captured in ``pytest.mark.parametrize`` lists, and ``jax.grad(ak.mean)``,
are ours; the wrappers keep awkward's ``__name__``). Every call is also made with real
awkward and the two results are compared (numbers to 1e-12 relative, NaN/None
positions, type); calls under JAX tracing (``jax.jvp`` etc.) are not compared (no
numbers yet: the tests compare them with ``jax.numpy``). Only the test files that
mention one of these functions are collected, and only tests that actually call one
are counted. Prints pass/fail counts (also without the tests about complex numbers,
timedeltas, typetracers and named axes, which ``analysis.stats`` does not support or
leaves to awkward), the failing tests, and the calls whose results differ from
awkward's.

Awkward's test sources: a checkout (``git archive`` as above), or the sdist of the
installed version, which ships ``tests/``::

    pip download --no-binary :all: --no-deps awkward==$(python -c "import awkward; print(awkward.__version__)")
    tar xzf awkward-*.tar.gz   # then awkward-<version>/tests
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import awkward as ak
import jax
import numpy as np
import pytest

from analysis import stats

NAMES = ("mean", "var", "std", "moment", "covar", "corr", "linear_fit")
PATTERN = re.compile(
    r"\b(?:ak|awkward)\.(?:operations\.)?(?:" + "|".join(NAMES) + r")\b|np\.(?:mean|var|std)\("
)
# tests about what analysis.stats deliberately does not do (README, statistics section)
EXCLUDED = re.compile(r"complex|timedelta|typetracer|named_axis", re.IGNORECASE)


def _same(a: Any, b: Any, rtol: float = 1e-12) -> bool:
    """Equal as nested lists: numbers to ``rtol`` (NaN == NaN), None and structure exact."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], rtol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(u, v, rtol) for u, v in zip(a, b, strict=True))
    if a is None or b is None:
        return a is None and b is None
    try:
        fa, fb = complex(a), complex(b)
    except TypeError:
        return a == b
    if any(math.isnan(v) for v in (fa.real, fa.imag, fb.real, fb.imag)):
        return all(math.isnan(u) == math.isnan(v) for u, v in ((fa.real, fb.real), (fa.imag, fb.imag)))
    return abs(fa - fb) <= rtol * max(abs(fa), abs(fb)) or fa == fb


def _difference(a: Any, b: Any, where: str = "") -> str:
    """Where two nested results first differ (as :func:`_same` judges), and the values."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return next((_difference(a[k], b[k], f"{where}.{k}") for k in a if not _same(a[k], b[k])), "")
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return next((_difference(u, v, f"{where}[{i}]") for i, (u, v) in pairs if not _same(u, v)), "")
    return f"at {where or 'top'}: {a!r:.60} != awkward {b!r:.60}"


def _plain(result: Any) -> Any:
    if isinstance(result, (ak.Array, ak.Record)):
        return result.to_list()
    if isinstance(result, ak.contents.Content):
        return ak.to_list(result)
    if hasattr(result, "tolist"):
        return result.tolist()
    return result


def _type(result: Any) -> str:
    if isinstance(result, (ak.Array, ak.Record)):
        return str(result.type)
    if hasattr(result, "dtype") and not isinstance(result, np.generic):
        return f"{type(result).__name__} {result.dtype}"
    if isinstance(result, ak.contents.Content):
        return "layout " + str(result.form.type)
    return type(result).__name__ if result is not None else "None"


def _types_only(args: tuple[Any, ...]) -> bool:
    return any(
        isinstance(a, (ak.Array, ak.Record)) and ak.backend(a) == "typetracer" for a in args
    )





def _traced(obj: Any) -> bool:
    """Any JAX tracer in ``obj`` (an awkward Array or layout, array, or a tuple of them)."""
    if isinstance(obj, (ak.Array, ak.Record)):
        obj = obj.layout
    if isinstance(obj, ak.record.Record):
        obj = obj.array
    if isinstance(obj, ak.contents.Content):
        found: list[bool] = []

        def visit(node: Any, **_: Any) -> None:
            if isinstance(node, ak.contents.NumpyArray):
                found.append(isinstance(node.data, jax.core.Tracer))

        ak.transform(visit, obj, return_value="none")
        return any(found)
    if isinstance(obj, (list, tuple)):
        return any(_traced(o) for o in obj)
    if isinstance(obj, dict):
        return any(_traced(o) for o in obj.values())
    return isinstance(obj, jax.core.Tracer)


class Substitute:
    """pytest plugin: swaps the functions in for the session, records which tests called them."""

    def __init__(self) -> None:
        self.originals: dict[tuple[Any, str], Any] = {}
        self.called = False
        self.inside = False
        self.outcomes: dict[str, str] = {}
        self.mismatches: list[str] = []
        self.calls = 0
        self.traced_calls = 0

    def _wrapper(self, name: str, real: Any) -> Any:
        ours = getattr(stats, name)

        @functools.wraps(real)
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.inside:  # called from inside ours or awkward's: not a test's call
                return real(*args, **kwargs)
            self.inside = True
            try:
                return self._compare(name, real, ours, args, kwargs)
            finally:
                self.inside = False

        return call

    def _compare(self, name: str, real: Any, ours: Any, args: Any, kwargs: Any) -> Any:
        self.called = True
        self.calls += 1
        try:
            expected = real(*args, **kwargs)
        except Exception as err:  # awkward refuses: ours must refuse too
            try:
                ours(*args, **kwargs)
            except Exception:
                raise
            self.mismatches.append(f"{name}: awkward raises {type(err).__name__}, ours not")
            raise
        got = ours(*args, **kwargs)
        if _traced(got) or _traced(args) or _traced(kwargs):
            self.traced_calls += 1
            if _type(got) != _type(expected):
                self.mismatches.append(f"{name}: type {_type(got)} != awkward {_type(expected)}")
        elif _types_only(args):  # typetracer: no numbers to compare
            if _type(got) != _type(expected):
                self.mismatches.append(
                    f"{name}: type {_type(got)} != awkward {_type(expected)}"
                )
        elif not _same(_plain(got), _plain(expected)):
            self.mismatches.append(f"{name}: value {_difference(_plain(got), _plain(expected))}")
        elif _type(got) != _type(expected):
            self.mismatches.append(f"{name}: type {_type(got)} != awkward {_type(expected)}")
        return got

    def install(self) -> None:
        modules = [ak, ak.operations]
        for name in NAMES:
            module = getattr(ak.operations, f"ak_{name}")
            real = getattr(module, name)
            wrapper = self._wrapper(name, real)
            for owner in (*modules, module):
                self.originals[(owner, name)] = getattr(owner, name)
                setattr(owner, name, wrapper)

    def uninstall(self) -> None:
        for (owner, name), value in self.originals.items():
            setattr(owner, name, value)

    # installed before collection: parametrize lists capture the substitutes
    def pytest_sessionstart(self, session: Any) -> None:
        self.install()

    def pytest_sessionfinish(self, session: Any) -> None:
        self.uninstall()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        self.called = False
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" and self.called:
            self.outcomes[item.nodeid] = report.outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", type=Path, help="awkward's tests/ directory")
    parser.add_argument("-k", default=None, help="pytest -k expression")
    parser.add_argument("-v", action="store_true", help="show every failure's message")
    args = parser.parse_args(argv)
    files = sorted(
        str(p) for p in args.tests.glob("test_*.py") if PATTERN.search(p.read_text(errors="ignore"))
    )
    plugin = Substitute()
    pytest_args = [*files, "-q", "-p", "no:cacheprovider", "-W", "ignore"]
    pytest_args += ["--tb=line" if args.v else "--tb=no", "-rN"]
    if args.k:
        pytest_args += ["-k", args.k]
    pytest.main(pytest_args, plugins=[plugin])
    counts = Counter(plugin.outcomes.values())
    print(f"\n{len(files)} files; {len(plugin.outcomes)} tests call the seven functions "
          f"({plugin.calls} calls)")
    print(f"passed {counts['passed']}, failed {counts['failed']}, skipped {counts['skipped']}")
    kept = {k: v for k, v in plugin.outcomes.items() if not EXCLUDED.search(k)}
    kept_counts = Counter(kept.values())
    print(f"without the tests about complex numbers, timedeltas, typetracers and named axes: "
          f"passed {kept_counts['passed']} of {len(kept)}")
    print(f"calls under JAX tracing (types compared, numbers checked by the tests): "
          f"{plugin.traced_calls}")
    for nodeid, outcome in sorted(plugin.outcomes.items()):
        if outcome == "failed":
            print(f"  FAILED {nodeid}")
    print(f"calls whose result differs from awkward's: {len(plugin.mismatches)}")
    for line, n in Counter(plugin.mismatches).most_common():
        print(f"  {n} x {line}")
    return 0 if counts["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
