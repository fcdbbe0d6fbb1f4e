"""``--quiet`` prints none of JAX's warnings about its persistent compilation cache (a
full disk gave one per program: 25 lines); without it they are shown."""

from __future__ import annotations

import sys
import warnings

import pytest

from analysis.cli import parser

_FULL = ("Error writing persistent compilation cache entry for 'jit_step': OSError: "
         "[Errno 28] No space left on device")


def _stderr_of(monkeypatch, capsys, command, flags: list[str]) -> str:
    """What ``main`` prints on stderr running ``command`` as ``evaluate`` with ``flags``."""
    monkeypatch.setattr(parser, "_command", lambda name: command)
    # Python's own display (pytest records warnings instead of printing them)
    monkeypatch.setattr(parser, "_default_showwarning",
                        lambda message, *a, **k: print(message, file=sys.stderr))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert parser.main(["evaluate", "configs/demo.yaml", *flags]) == 0
    return capsys.readouterr().err


@pytest.mark.parametrize("quiet", [True, False])
def test_quiet_silences_jax_cache_warnings(monkeypatch, capsys, quiet):
    def command(args):
        for _ in range(3):
            warnings.warn(_FULL, stacklevel=1)
        warnings.warn("another library's warning", stacklevel=1)
        return 0

    err = _stderr_of(monkeypatch, capsys, command, ["--quiet"] if quiet else [])
    assert ("No space left on device" in err) is not quiet
    assert "another library's warning" in err  # only JAX's cache warnings are silenced


@pytest.mark.parametrize("debug", [False, True])
def test_numbas_pedantic_scope_warning_only_with_debug(monkeypatch, capsys, debug):
    """numba's "variable '...' is not in scope" IR check (a cold compile of the demo's
    kernels printed it, asking the user to report it to numba) is shown with --debug only."""
    from numba.core.errors import NumbaIRAssumptionWarning

    def command(args):
        warnings.warn("variable '_lambda__v166__vphi34_0_2.1' is not in scope.",
                      NumbaIRAssumptionWarning, stacklevel=1)
        warnings.warn("another library's warning", stacklevel=1)
        return 0

    err = _stderr_of(monkeypatch, capsys, command, ["--debug"] if debug else [])
    assert ("is not in scope" in err) is debug
    assert "another library's warning" in err
