"""``--quiet`` prints none of JAX's warnings about its persistent compilation cache (a
full disk gave one per program: 25 lines); without it they are shown."""

from __future__ import annotations

import sys
import warnings

import pytest

from analysis.cli import parser

_FULL = ("Error writing persistent compilation cache entry for 'jit_step': OSError: "
         "[Errno 28] No space left on device")


@pytest.mark.parametrize("quiet", [True, False])
def test_quiet_silences_jax_cache_warnings(monkeypatch, capsys, quiet):
    def command(args):
        for _ in range(3):
            warnings.warn(_FULL, stacklevel=1)
        warnings.warn("another library's warning", stacklevel=1)
        return 0

    monkeypatch.setattr(parser, "_command", lambda name: command)
    # Python's own display (pytest records warnings instead of printing them)
    monkeypatch.setattr(parser, "_default_showwarning",
                        lambda message, *a, **k: print(message, file=sys.stderr))
    argv = ["evaluate", "configs/demo.yaml"] + (["--quiet"] if quiet else [])
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert parser.main(argv) == 0
    err = capsys.readouterr().err
    assert ("No space left on device" in err) is not quiet
    assert "another library's warning" in err  # only JAX's cache warnings are silenced
