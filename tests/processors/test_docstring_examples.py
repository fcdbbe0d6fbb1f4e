"""The usage examples in the ready-made processors' module docstrings run as written.

``processors/jet_moments.py`` and ``processors/dimuon.py`` open with a ``::`` block a
user copies first; it once called coffea's ``Runner`` with the old positional
``treename`` (``runner(fileset, "Events", processor_instance=...)``), a ``TypeError``
on the coffea this package needs, and used ``stats`` without importing it. Each block
runs here, in a fresh interpreter, on the real file it names.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

from tests.opt_helpers import cli_env


def docstring_example(module: str) -> str:
    """The literal block after the first ``::`` of ``module``'s docstring, dedented."""
    doc = importlib.import_module(module).__doc__ or ""
    _, sep, rest = doc.partition("::\n")
    assert sep, f"{module}: no '::' example block in the module docstring"
    lines = []
    for line in rest.splitlines()[1:]:  # the blank line after '::'
        if line and not line.startswith("    "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines))


@pytest.mark.slow  # a whole chunked pass with eager JAX in a fresh interpreter
@pytest.mark.parametrize(
    ("module", "dataset", "statistic"),
    [("processors.jet_moments", "ttbar", "jet_pt"), ("processors.dimuon", "dy", "mass")],
)
def test_module_docstring_example_runs(module, dataset, statistic, shared_data, tmp_path):
    code = docstring_example(module)
    assert "../shared/data/" in code, f"{module}: the example should name a real file"
    code = code.replace("../shared/data/", f"{shared_data}/")
    # The block's last line is the user's question; print its answer to check it.
    *body, last = code.rstrip().splitlines()
    script = "\n".join([*body, f"value, grad = {last.split('#')[0].strip()}",
                        "assert value == value and grad, (value, grad)",
                        f"print({dataset!r}, {statistic!r}, float(value))"])
    path = tmp_path / "example.py"
    path.write_text(script)
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{module}'s docstring example fails:\n{done.stderr[-3000:]}"
    assert f"{dataset} {statistic} " in done.stdout
