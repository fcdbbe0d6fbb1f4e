"""The README's first command run twice: a finished run of the same config is continued
(reported again, no more steps) without an error; a changed config still needs
``--overwrite``, said in one line naming the changed key.

Reference: the first run's results.json (the history and parameters are the same).
"""

from __future__ import annotations

import json

from analysis.cli.parser import main
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config


def _optimize(config, out, *extra):
    return ["optimize", str(config), "-o", str(out), "--quiet", "--no-plots", *extra]


def test_the_same_command_twice(small_data, tmp_path, capsys):
    config = write_config(tmp_path / "opt.yaml", H.config_dict(small_data, optimizer={"steps": 2}))
    out = tmp_path / "out"
    assert main(_optimize(config, out)) == 0
    first = json.loads((out / "results.json").read_text())
    capsys.readouterr()
    assert main(_optimize(config, out)) == 0  # no --resume, no --overwrite
    assert "continuing the earlier run" in capsys.readouterr().err
    again = json.loads((out / "results.json").read_text())
    assert again["steps_run"] == 2
    assert H.comparable_history(again["history"]) == H.comparable_history(first["history"])
    assert again["parameters"] == first["parameters"]

    changed = write_config(tmp_path / "opt.yaml", H.config_dict(
        small_data, optimizer={"steps": 2, "learning_rate": 0.02}))
    assert main(_optimize(changed, out)) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "optimizer.learning_rate" in line and "--overwrite" in line
    assert main(_optimize(changed, out, "--overwrite")) == 0
