"""The programs an optimisation's end runs, compiled on a thread while its loop runs.

After the loop, ``optimize`` evaluates the hard-cut objective at keep-best's points
(:func:`analysis.optimize.objectives.objective_from_states` at order 0: one program,
traced, lowered and loaded from JAX's persistent cache in each new process; ~0.2 s of
CPU on the demo, the steps' programs being order 1), reports every dataset's
statistics with their derivatives (:func:`analysis.pipeline.results.dataset_report`:
one program) and keep-best's MC uncertainties
(:func:`analysis.optimize.bootstrap.bootstrap_values`: the objective over the bootstrap
replicas, about twenty JAX operations run one by one, each a program of its own). Each
is compiled once per process, where it is first called. The loop's
steps leave a core mostly idle (the main thread waits for the chunks' kernels), so
:func:`warm_tail` compiles them there, after the first step, on the first step's
states (every observable, at the loop's order: the final soft pass's structure and
shapes; the hard-cut passes' states have the same structure, their Jacobians zeros of
the same shape; the replicas' arrays are placeholders of their shape): the end then finds
them compiled. Nothing it computes is kept but the programs, which are the same
whichever thread compiles them, so the results are the same bit for bit.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from analysis.optimize.bootstrap import bootstrap_values, replicated
from analysis.optimize.objectives import PythonTerm, objective_from_states
from analysis.pipeline.results import dataset_report

__all__ = ["warm_tail"]


def warm_tail(run: Any) -> threading.Thread | None:
    """Start compiling, on a daemon thread, the programs the end of ``run`` will call
    (module docstring); None where there is nothing to compile from.

    Parameters
    ----------
    run : analysis.optimize.loop.Optimization
        After its first step, with :attr:`initial_states` (the step computed every
        observable: ``optimize`` with plots).

    Returns
    -------
    threading.Thread or None
        The thread, or None. A program it has not compiled yet is compiled where it is
        called; ``optimize`` joins it after the loop, so that no compilation runs on
        into the end (the same programs twice) or the interpreter's exit.
    """
    states = getattr(run, "initial_states", None)
    if not states or run.reverse:
        return None
    replicas = int(run.config.optimizer.replicas)

    def work() -> None:
        try:
            # the hard-cut values' program (keep-best's passes, the final hard pass): its
            # value on the first step's states is dropped. Not with a python term: that
            # runs eagerly (nothing to compile) and the user's function would be called
            # once more, on a thread
            if not any(isinstance(term, PythonTerm) for term in run.objective.terms):
                objective_from_states(run.objective, states, order=0, strict=False)
            for state in states.values():  # the report's program
                dataset_report(state, run.plan)
            # the uncertainties' operations, on (4, K) placeholders (a likelihood's are
            # its fits, replica by replica: compiled by the hard-cut evaluations)
            if replicas >= 2 and replicated(run.objective) == "yields":
                ones = {name: np.ones((4, replicas)) for name in states}
                bootstrap_values(run.objective, states, ones)
        except Exception:  # noqa: BLE001  (best effort: the end compiles what is missing)
            return

    thread = threading.Thread(target=work, name="diffcoffea-warm-tail", daemon=True)
    thread.start()
    return thread
