"""The fork guard's refusal reaches a command-line user as one line, exit 2: a
:class:`~analysis.runtime.forkguard.ForkAfterJaxError` is a ``BaseException`` (so that coffea's
retries, bad-file skips and wrappers pass it by), which the command line's catch of
``Exception`` would not see. With ``--debug`` it is raised as it is.

Reference: the guard's own message, verbatim.
"""

from __future__ import annotations

import pytest

from analysis.cli import parser
from analysis.runtime import forkguard


def _refuse(args):
    raise forkguard.ForkAfterJaxError(forkguard.MESSAGE)


@pytest.fixture()
def refusing(monkeypatch):
    monkeypatch.setattr(parser, "_command", lambda name: _refuse)


def test_the_refusal_is_one_line_and_exit_2(refusing, capsys):
    assert parser.main(["evaluate", "configs/ttbar.yaml"]) == 2
    err = capsys.readouterr().err
    assert err == f"diffcoffea: error: {forkguard.MESSAGE}\n"
    assert "Traceback" not in err


def test_debug_raises_it(refusing):
    with pytest.raises(forkguard.ForkAfterJaxError):
        parser.main(["--debug", "evaluate", "configs/ttbar.yaml"])


def test_no_executor_catch_of_exception_takes_it():
    assert not issubclass(forkguard.ForkAfterJaxError, Exception)
    assert "\n" not in forkguard.MESSAGE
