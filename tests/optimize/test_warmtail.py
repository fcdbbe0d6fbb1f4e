"""The end's programs compiled beside the loop (:func:`analysis.optimize.warmtail.warm_tail`):
in a fresh process (the programs are per process), after the first step the thread
compiles the hard-cut values' program (order 0), the report's program and the bootstrap
replicas' operations, and the end's calls then compile nothing. That the results are
the same with it as without is ``tests/cli/test_plotworker.py`` (with plots, the thread runs; without, it does not)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests import opt_helpers as H
from tests.conftest import REPO

_SCRIPT = textwrap.dedent(
    """
    import json, sys, tempfile
    import numpy as np
    from jax import monitoring
    from analysis.driver.runner import Evaluator
    from analysis.optimize.loop import Optimization
    from analysis.optimize.bootstrap import bootstrap_uncertainty
    from analysis.optimize.warmtail import warm_tail
    from analysis.pipeline.results import dataset_report
    from tests import opt_helpers as H
    from pathlib import Path

    traced = []
    monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: traced.append(name)
        if name == "/jax/core/compile/jaxpr_trace_duration" else None)
    config = H.make_config(Path(sys.argv[1]), optimizer={"steps": 2, "replicas": 20})
    out = {}
    with Evaluator(config) as ev, tempfile.TemporaryDirectory() as tmp:
        run = Optimization(config, ev, Path(tmp))
        run.do_step()
        n = len(traced)
        thread = warm_tail(run)
        if thread is not None:
            thread.join()
        out["warm"] = len(traced) - n
        n = len(traced)
        reports = [dataset_report(st, run.plan) for st in run.initial_states.values()]
        rng = np.random.default_rng(0)
        reps = {name: rng.uniform(1.0, 2.0, (4, 20)) for name in run.initial_states}
        sigma = bootstrap_uncertainty(run.objective, run.initial_states, reps)
        out["ok"] = bool(reports) and sigma is not None and bool(np.isfinite(sigma))
        out["after"] = len(traced) - n
        # keep-best's hard-cut values (order 0, its passes' own states): no program more
        from analysis.stats import _programs
        n = sum(1 for key in _programs._CALLS if key[0] == "objective")
        hard = run.hard(run.params())
        out["hard_objective_programs"] = sum(
            1 for key in _programs._CALLS if key[0] == "objective") - n
        out["ok"] = out["ok"] and (hard["objective"] is None
                                   or bool(np.isfinite(hard["objective"])))
    print(json.dumps(out))
    """
)


def test_the_end_compiles_nothing_after_the_warm_up(small_data):
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(small_data)], cwd=REPO,
                          env=H.cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"]
    assert out["warm"] > 0  # the thread compiled the programs ...
    assert out["after"] == 0, out  # ... that the report and the uncertainties then run
    assert out["hard_objective_programs"] == 0, out  # ... and the hard-cut values' program
