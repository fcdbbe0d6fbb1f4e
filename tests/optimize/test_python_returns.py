"""A ``python`` objective's return value is untrusted (issue 21.4).

It must be a real finite scalar (a Python or numpy number, or a JAX scalar, also while
traced under ``jax.grad``); a string, ``None``, an array, a complex number, a bool or NaN
is one line naming the function and what it returned. ``SystemExit`` raised inside is
reported (exit 2), not obeyed (exit 0 with an empty output directory).
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis.cli.parser import main
from analysis.config.terms import _call_user
from analysis.errors import DiffcoffeaError
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config

BAD = [
    (lambda s: "abc", "str 'abc'"),
    (lambda s: None, "NoneType None"),
    (lambda s: [1.0], "list [1.0]"),
    (lambda s: np.ones(3), "an array of shape (3,)"),
    (lambda s: jnp.ones((1, 1)), "an array of shape (1, 1)"),
    (lambda s: 1 + 2j, "a complex128 value ((1+2j))"),
    (lambda s: True, "a bool (True)"),
    (lambda s: float("nan"), "float nan"),
    (lambda s: np.float64("inf"), "float64 np.float64(inf)"),
    (lambda s: 10**400, "int 1000000"),
]


@pytest.mark.parametrize("fn,what", BAD, ids=[b[1] for b in BAD])
def test_a_bad_return_is_one_line_naming_the_function(fn, what) -> None:
    with pytest.raises(DiffcoffeaError) as info:
        _call_user(fn, "mod:loss", {}, "c.yaml")
    text = str(info.value)
    assert text.startswith(f"c.yaml: objective: python function 'mod:loss' returned {what}"), text
    assert text.endswith("; expected a real finite scalar") and "\n" not in text


@pytest.mark.parametrize("value", [1.5, 2, np.float32(3.0), np.int64(4), jnp.float64(5.0)])
def test_real_scalars_pass(value) -> None:
    assert _call_user(lambda s: value, "mod:loss", {}, "c.yaml") is value


def test_traced_scalars_pass_and_traced_arrays_do_not() -> None:
    g = jax.grad(lambda x: _call_user(lambda s: s["x"] ** 2, "m:f", {"x": x}, "c.yaml"))
    assert float(g(3.0)) == 6.0
    with pytest.raises(DiffcoffeaError, match=r"returned an array of shape \(2,\)"):
        jax.grad(lambda x: _call_user(lambda s: jnp.stack([x, x]), "m:f", {}, "c.yaml"))(1.0)


@pytest.mark.parametrize("exc", [SystemExit(0), SystemExit("bye")])
def test_system_exit_inside_is_reported(exc) -> None:
    def leave(stats):
        raise exc

    with pytest.raises(DiffcoffeaError, match=r"python function 'm:f' raised SystemExit"):
        _call_user(leave, "m:f", {}, "c.yaml")


def test_the_command_line_exits_2_with_one_line(small_data, tmp_path, capsys, monkeypatch) -> None:
    (tmp_path / "hostile_loss.py").write_text(
        "def leave(stats):\n    raise SystemExit(0)\n\n"
        "def text(stats):\n    return 'abc'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, what in (("leave", "raised SystemExit: 0"), ("text", "returned str 'abc'")):
        terms = [{"type": "python", "function": f"hostile_loss:{name}"}]
        cfg = H.config_dict(small_data, objective={"terms": terms}, optimizer={"steps": 2})
        path = write_config(tmp_path / f"{name}.yaml", cfg)
        out = tmp_path / f"out-{name}"
        capsys.readouterr()
        assert main(["optimize", str(path), "-o", str(out), "--quiet", "--no-plots"]) == 2
        line = one_line_error(capsys.readouterr().err)
        assert f"python function 'hostile_loss:{name}' {what}" in line, line
    sys.modules.pop("hostile_loss", None)
