"""The optimisation loop: state, steps, annealing, convergence, stochastic chunks.

Each step is one pass over all chunks (any coffea executor) giving the objective
and its exact gradient (and, when the optimiser asks for it, its Hessian) with
respect to the trainable parameters; then one update of the configured optimiser
(:mod:`analysis.optimize.optimizers`: any optax optimiser, or Newton's trust region).

- Coordinates: the optimiser sees ``u = (theta - lower) / (upper - lower)``, so one
  learning rate suits a pT threshold in GeV and a b-tag score in [0, 1].
- Bounds: projection. After each update ``u`` is clipped to [0, 1]; parameters
  never leave their bounds. Trainable bin edges are moved as logits of the bin widths
  instead (:mod:`analysis.optimize.edgecoords`: ordered inside the outer edges by
  construction).
- Annealing: every cut width follows ``w_k = w_0 * f**(k / (A - 1))``
  (``exponential``) or ``w_0 * (1 - (1 - f) k / (A - 1))`` (``linear``), with
  ``f = anneal.final_width_factor`` and ``A = anneal.steps`` (default
  ``optimizer.steps``), so soft cuts approach hard ones; from step ``A - 1`` on the
  widths are the final ones.
- Convergence: stop when ``|J_k - J_{k-window}| <= tolerance * max(|J_k|, 1e-12)``
  with both steps at the final widths (annealing itself moves the objective, so a
  change across a width change says nothing about the optimiser): with
  ``anneal.steps`` equal to the step budget (the default) no run can converge before
  its last step, so a run meant to converge anneals in fewer steps than it has.
- Stochastic mode: a step uses ``chunks_per_step`` chunks (at least one of every
  dataset) drawn with a generator seeded by ``(seed, step)``, so a resumed run
  draws the same chunks.
- A step computes the observables its terms read only (the first and the last step,
  and the final evaluations, compute all): :func:`analysis.optimize.objectives.step_observables`.
- Checkpoint: after every step ``checkpoint.npz`` (parameters, optimiser state,
  history; data only, see :mod:`analysis.optimize.checkpoint`) is written atomically in the
  output directory; ``--resume`` continues from it and reaches the same final
  parameters as an uninterrupted run.

Where the parts live (every name is re-exported here): :mod:`analysis.optimize.looptools`
(the annealing schedule, the update program, the unit coordinates, the checkpoint's
fingerprint), :mod:`analysis.optimize.hardeval` (the hard-cut validation and the final
evaluations: :class:`Optimization` inherits them as a mixin).

The command-line entry (``diffcoffea optimize``) is :func:`analysis.cli.parser.run_optimize`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from analysis.config.loader import Config
from analysis.errors import ConfigError
from analysis.optimize import checkpoint as _ckpt
from analysis.optimize.edgecoords import with_edges
from analysis.optimize.hardeval import HardEvaluations
from analysis.optimize.lksection import warn_floor
from analysis.optimize.looptools import (
    Coordinates,
    annealed_widths,
    config_fingerprint,
    jitted_update,
    load_checkpoint,
    save_checkpoint,
    update_description,
)
from analysis.optimize.objectives import Objective, objective_from_states, step_observables
from analysis.optimize.optimizers import Optimizer, make_optimizer
from analysis.optimize.reverse import reverse_objective
from analysis.optimize.scoreopt import score_mask, split_optimizer
from analysis.optimize.status import run_status
from analysis.optimize.undefined import UNDEFINED, reason, refuse, require_finite, stop_message
from analysis.pipeline.plan import initial_widths
from analysis.stats.derive import choose_mode

__all__ = [
    "CHECKPOINT",
    "Coordinates",
    "Optimization",
    "annealed_widths",
    "config_fingerprint",
    "jitted_update",
    "load_checkpoint",
    "require_finite",
    "save_checkpoint",
    "update_description",
]

CHECKPOINT = _ckpt.CHECKPOINT


class Optimization(HardEvaluations):
    """State and steps of one optimisation run (see the module docstring).

    ``Optimization(config, evaluator, outdir)``: :meth:`do_step` runs one pass and one
    optimiser update (and writes the checkpoint), :attr:`done` says when to stop,
    :meth:`final` evaluates the soft and hard objective at the final parameters.
    ``initial_observables``: the first step computes every observable (its states are
    :attr:`initial_states`, the plots' initial histograms); ``False`` (the command line
    without plots): only those the objective reads, as the steps after it (the same
    history bit for bit: :func:`analysis.optimize.objectives.step_observables`).
    ``background_checkpoints``: each step's checkpoint is written on a thread while the
    next step runs (the command line; :meth:`wait_checkpoint` after the loop).
    """

    def __init__(
        self, config: Config, evaluator, outdir: Path, *, steps: int | None = None,
        initial_observables: bool = True, background_checkpoints: bool = False,
    ) -> None:
        self.config = config
        self.ev = evaluator
        self.plan = evaluator.plan
        self.objective = Objective(config, self.plan)
        self.outdir = Path(outdir)
        if steps is not None:
            config.optimizer.steps = steps
        self.opt_cfg = config.optimizer
        #: length of the annealing schedule: ``anneal.steps``, else this run's steps (or
        #: the first run's on resume)
        self.anneal_steps = self.opt_cfg.anneal.steps or self.opt_cfg.steps
        names = self.plan.trainable_names
        if not names:
            raise ConfigError(
                f"{config.source}: parameters: nothing to optimise (no trainable parameter)"
            )
        self.coords = with_edges(Coordinates(config, names), config)  # trainable edges
        described = update_description(config)  # what the transform is made from
        self.optimizer = make_optimizer(config)
        mask = score_mask(names)
        if mask.any() and self.optimizer.order == 1:  # the weights' own learning rate
            opt = config.optimizer
            self.optimizer = Optimizer(split_optimizer(
                config, mask, lambda lr: getattr(optax, opt.name)(learning_rate=lr, **opt.kwargs)
            ), 1)
        # Reverse mode (two passes) for many trainable parameters, as for own processors.
        self.reverse = choose_mode(len(names)) == "reverse"
        if mask.any() and (self.optimizer.order >= 2 or config.output.hessian):
            # a Hessian over a network's weights: P^2 forward tangents through every chunk
            what = ("optimizer.method: newton" if self.optimizer.order >= 2
                    else "output.hessian: true")
            raise ConfigError(
                f"{config.source}: {what} needs the Hessian over all {len(names)} trainable "
                f"parameters (a learned score's weights among them); reverse mode gives "
                f"gradients only: use a first-order optimizer (adam, sgd) and no output.hessian"
            )
        self.w0 = np.asarray(initial_widths(config), dtype=np.float64)
        val = config.optimizer.validation
        #: the validation split's held-out fraction (None: off); the loop's passes
        #: weigh the training events only (:attr:`analysis.driver.runner.Evaluator.part`)
        self.fraction = None if val is None else float(val.fraction)
        self._use_part("train" if self.fraction is not None else "all")
        #: every event's sum of weights per dataset, once a pass over all events ran
        self.all_sumw: dict[str, float] | None = None
        #: per part, the bootstrap replicas' totals (they do not depend on the cuts)
        self._replica_totals: dict[str, Any] | None = None
        #: lanes a hard-cut pass kept for a later evaluation at the same points
        #: (:meth:`~analysis.optimize.hardeval.HardEvaluations._kept_lanes`): by (the hard
        #: point's :meth:`point_key`, part), ``(result, states, with its uncertainty)``
        self._kept: dict[tuple, tuple[dict[str, Any], dict, bool]] = {}
        #: :meth:`hard` at the initial parameters on the loop's events, once
        #: :meth:`validation` computed it (in its one pass); else None
        self.start_hard: dict[str, Any] | None = None
        self.fingerprint = config_fingerprint(config)
        self.order = self.optimizer.order
        init = config.initial_params()
        self.u = self.coords.clip(self.coords.to_u([init[n] for n in names]))
        self.opt_state = self.optimizer.transform.init(jnp.asarray(self.u))
        #: a first-order optimiser's update and its application as one jitted program
        #: (eagerly, each of its ~20 operations is a program of its own, compiled or
        #: loaded at the first step of every process); Newton's runs in numpy
        # (compiled ahead of time where the transform is config.optimizer's alone: no
        # learned score's weights with their own learning rate)
        self._update = (jitted_update(self.optimizer.transform,
                                      None if mask.any() else described)
                        if self.order == 1 else None)
        self.step = 0
        self.history: list[dict[str, Any]] = []
        self.converged = False
        #: why the loop stopped before its budget (``objective undefined at step k: ...``,
        #: :mod:`analysis.optimize.undefined`); None while it runs or when it did not
        self.stopped: str | None = None
        self._step_u: np.ndarray | None = None
        #: with keep-best (:mod:`analysis.optimize.keepbest`): the step
        #: :meth:`validation_history` chose (its parameters are the reported ones); else None
        self.best_step: int | None = None
        #: and its parameters, which :meth:`final` then reports
        self.best_params: dict[str, float] | None = None
        #: passes over the data run by this object (a reused pass is not counted)
        self.passes = 0
        #: :func:`analysis.optimize.keepbest.track_hard`'s result, once run
        self.tracked: dict[str, Any] | None = None
        self._last: tuple | None = None
        self.last_states: dict | None = None
        #: the states of step 0 (initial parameters and widths, all chunks), if run here
        self.initial_states: dict | None = None
        #: the observables the steps after the first compute (None: all; module docstring)
        self.step_observables = None if self.reverse else step_observables(
            self.objective, self.plan, self.order)
        self.initial_observables = initial_observables
        #: with ``background_checkpoints``: each step's checkpoint is written while the
        #: next step runs (:class:`~analysis.optimize.checkpoint.CheckpointWriter`; call
        #: :meth:`wait_checkpoint` after the last step); else before :meth:`do_step` returns
        self._writer = _ckpt.CheckpointWriter() if background_checkpoints else None

    def _use_part(self, part: str) -> None:
        """Passes weigh ``part``'s events; the objective's MC variance is scaled to the
        full sample's (:func:`analysis.optimize.objectives.dataset_stats`)."""
        if part == "all":
            self.ev.part, self.objective.variance_scale = None, 1.0
        else:
            f = self.fraction
            self.ev.part = (part, f)
            self.objective.variance_scale = f if part == "held_out" else 1.0 - f

    def use_all_events(self) -> None:
        """Later passes (plots) weigh every event, whatever the validation split."""
        self._use_part("all")

    @contextlib.contextmanager
    def all_events(self) -> Iterator[None]:
        """The passes inside weigh every event (as after :meth:`use_all_events`); the
        part the passes weighed before is restored after."""
        kept = "all" if self.ev.part is None else self.ev.part[0]
        self._use_part("all")
        try:
            yield
        finally:
            self._use_part(kept)

    # parameters
    def params(self, u: np.ndarray | None = None) -> dict[str, float]:
        theta = self.coords.to_theta(self.u if u is None else u)
        return {n: float(v) for n, v in zip(self.coords.names, theta)}

    def hard_params(self, params: dict[str, float]) -> dict[str, float]:
        """Parameters for the hard-cut evaluation: integer parameters rounded."""
        out = dict(params)
        for i, name in enumerate(self.plan.param_names):
            if self.plan.integer[i] and name in out:
                # round half up, as the kernel's width-0 step does
                out[name] = float(np.floor(out[name] + 0.5))
        return out

    def resume(self) -> None:
        data = load_checkpoint(
            self.outdir / CHECKPOINT, self.fingerprint, like=self.opt_state,
            names=self.coords.names, config=_ckpt.config_snapshot(self.config),
        )
        self.step = data["step"]
        self.u = np.asarray(data["u"], dtype=np.float64)
        self.opt_state = jax.tree_util.tree_map(jnp.asarray, data["opt_state"])
        self.history = data["history"]
        self.converged = data.get("converged", False)
        first = ((data.get("config") or {}).get("optimizer") or {}).get("steps")
        if (self.opt_cfg.anneal.steps is None and isinstance(first, int)
                and not isinstance(first, bool) and first >= 0):
            self.anneal_steps = first

    def checkpoint(self) -> None:
        snapshot = _ckpt.config_snapshot(self.config)
        if self.opt_cfg.anneal.steps is None:  # the schedule's length, kept
            snapshot["optimizer"]["steps"] = self.anneal_steps
        write = save_checkpoint if self._writer is None else self._writer.submit
        write(
            self.outdir / CHECKPOINT,
            {
                "fingerprint": self.fingerprint,
                "names": self.coords.names,
                "config": snapshot,
                "step": self.step,
                "u": np.array(self.u),
                "opt_state": jax.tree_util.tree_map(np.asarray, self.opt_state),
                "history": self.history,
                "converged": self.converged,
            },
        )

    def wait_checkpoint(self, *, raise_error: bool = True) -> None:
        """With ``background_checkpoints``: wait until the last step's checkpoint is
        written; a failed write's error raised (``raise_error``) or dropped (the run is
        failing already). Without: nothing to wait for."""
        if self._writer is not None:
            self._writer.wait(raise_error=raise_error)

    def _chunks_for(self, step: int) -> list | None:
        if not self.opt_cfg.stochastic:
            return None
        chunks = self.ev.chunks
        k = min(self.opt_cfg.chunks_per_step or max(1, len(chunks) // 4), len(chunks))
        rng = np.random.default_rng([self.opt_cfg.seed, step])
        # One chunk of every dataset first: a dataset left out of a step has zero
        # yield, and a zero background yield makes the significance undefined.
        groups: dict[str, list[int]] = {}
        for i, chunk in enumerate(chunks):
            groups.setdefault(chunk.dataset, []).append(i)
        picked = {int(rng.choice(idx)) for idx in groups.values()}
        rest = [i for i in range(len(chunks)) if i not in picked]
        extra = min(max(k - len(picked), 0), len(rest))
        picked.update(int(i) for i in rng.choice(rest, size=extra, replace=False))
        return [chunks[i] for i in sorted(picked)]

    def evaluate(
        self,
        params: dict[str, float],
        widths: np.ndarray,
        *,
        order: int = 1,
        chunks=None,
        strict: bool = True,
        observables: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        states = self._reusable(params, widths, order, observables) if chunks is None else None
        if states is None and self.reverse and order == 1:
            res = reverse_objective(self.objective, self.ev, params, widths, chunks=chunks,
                                    strict=strict)
            self.passes += 2
            self._last = None  # values only: not reusable for a gradient
            self.last_states = res.pop("states")
            return res
        if states is None:
            states = self.ev.run(params, widths=widths, order=order, chunks=chunks,
                                 observables=observables)
            self.passes += 1
            self._last = (dict(params), np.array(widths, dtype=np.float64), order,
                          chunks is None, observables, self.ev.part)
        self.last_states = states
        return objective_from_states(self.objective, states, order=order, strict=strict)

    def _reusable(self, params: dict[str, float], widths: np.ndarray, order: int,
                  observables: tuple[str, ...] | None = None):
        """The last pass's states if it was over all chunks at exactly these parameters
        and widths, with at least this derivative order and the observables asked for
        (``None``: all); else ``None``."""
        if self._last is None:
            return None
        p, w, o, full, obs, part = self._last
        same = (p == params and np.array_equal(w, np.asarray(widths, dtype=np.float64))
                and part == self.ev.part)
        has = obs is None or obs == observables
        return self.last_states if full and same and o >= order and has else None

    def do_step(self) -> dict[str, Any] | None:
        """One pass and one update; appends to the history and writes the checkpoint.
        Returns the history entry, or None where the objective became undefined at this
        step (after the first): the run stops (:attr:`stopped`), nothing is appended."""
        start = time.perf_counter()
        k = self.step
        widths = annealed_widths(self.w0, k, self.config, steps=self.anneal_steps)
        params = self.params()
        chunks = self._chunks_for(k)
        # undefined at the start: the config is unusable (one line, exit 2); later: the
        # run stops and reports its points (analysis.optimize.undefined)
        res = None
        try:
            # all observables at the first step (the plots' initial histogram: where
            # there are plots) and at the last (the final evaluation may reuse it)
            every = (k == 0 and self.initial_observables) or k == self.opt_cfg.steps - 1
            res = self.evaluate(params, widths, order=self.order, chunks=chunks, strict=k == 0,
                                observables=None if every else self.step_observables)
            why = reason(res, self.config.source)
        except UNDEFINED as err:  # name the step (as for NaN)
            if k == 0:
                raise refuse(err, k, self.outdir / CHECKPOINT) from None
            why = reason(None, self.config.source, err)
        if k == 0 and chunks is None and every:
            self.initial_states = self.last_states  # for the plots' initial histogram
        if k == 0:
            require_finite(res, k, self.outdir / CHECKPOINT)
            warn_floor(self.config, self.plan, self.last_states)  # said again at the end
        elif why is not None:
            return self._stop(k, why)
        g_u, h_u = self.coords.chain(self.u, res["grad"], res["hess"])
        self._step_u = self.u  # the last step's point, where a stop moves back to
        if self._update is not None:
            u, self.opt_state = self._update(jnp.asarray(g_u), self.opt_state,
                                             jnp.asarray(self.u), res["objective"])
        else:
            updates, self.opt_state = self.optimizer.transform.update(
                jnp.asarray(g_u),
                self.opt_state,
                jnp.asarray(self.u),
                value=res["objective"],
                hessian=None if h_u is None else jnp.asarray(h_u),
            )
            u = optax.apply_updates(jnp.asarray(self.u), updates)
        self.u = self.coords.clip(np.asarray(u))
        entry = {
            "step": k,
            "objective": res["objective"],
            "significance": res["significance"],
            "gradient": {n: float(v) for n, v in zip(self.coords.names, res["grad"])},
            "parameters": params,
            "widths": [float(w) for w in widths],
            "yields": res["yields"],
            "wall_time_s": time.perf_counter() - start,
        }
        self.history.append(entry)
        self.step += 1
        self.converged = self._converged()
        self.checkpoint()
        return entry

    def _stop(self, k: int, why: str) -> None:
        """Stop at step ``k`` (its objective undefined: ``why``): the parameters go back
        to step ``k - 1``'s, the last defined point (:mod:`analysis.optimize.undefined`)."""
        self.stopped = stop_message(k, why)
        if self._step_u is not None:  # exactly (a resumed run's first step: from the history)
            self.u = self._step_u
        else:
            last = self.history[-1]["parameters"]
            self.u = self.coords.clip(self.coords.to_u([last[n] for n in self.coords.names]))

    def _converged(self) -> bool:
        w = self.opt_cfg.window
        # both compared steps (k and k - window) at the final widths, reached at step A - 1
        annealed = (self.opt_cfg.anneal.schedule == "none"
                    or self.step - 1 - w >= self.anneal_steps - 1)
        if not annealed or len(self.history) <= w:
            return False
        return self._relative_change() <= self.opt_cfg.tolerance

    def _relative_change(self) -> float | None:
        """``|J_k - J_{k-window}| / max(|J_k|, 1e-12)`` of the last step (the convergence
        measure), ``None`` before ``window + 1`` steps."""
        w = self.opt_cfg.window
        if len(self.history) <= w:
            return None
        a, b = self.history[-1]["objective"], self.history[-1 - w]["objective"]
        return abs(a - b) / max(abs(a), 1e-12)

    def status(
        self, final: dict[str, Any], initial_hard: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """How the run ended (:func:`analysis.optimize.status.run_status`)."""
        return run_status(self, final, initial_hard)

    @property
    def done(self) -> bool:
        return self.converged or self.stopped is not None or self.step >= self.opt_cfg.steps
