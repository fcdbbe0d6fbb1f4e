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

The command-line entry (``diffcoffea optimize``) is :func:`analysis.cli.parser.run_optimize`.
"""

from __future__ import annotations

import hashlib
import json
import time
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
from analysis.optimize.keepbest import track_hard, validation_entries
from analysis.optimize.objectives import (
    Objective,
    bootstrap_uncertainty,
    bootstrap_values,
    objective_from_states,
    step_observables,
)
from analysis.optimize.optimizers import Optimizer, make_optimizer
from analysis.optimize.reverse import reverse_objective
from analysis.optimize.scoreopt import score_mask, split_optimizer
from analysis.optimize.status import run_status
from analysis.optimize.undefined import UNDEFINED, reason, refuse, require_finite, stop_message
from analysis.pipeline.plan import initial_widths
from analysis.stats._programs import program_call
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


def annealed_widths(
    w0: np.ndarray, step: int, config: Config, *, steps: int | None = None
) -> np.ndarray:
    """Cut widths at ``step`` (see the module docstring); ``steps``: the length of the
    schedule (default ``optimizer.steps``; a run extended with ``--resume --steps N``
    keeps its first length, so its path is unchanged and it goes on at the final widths)."""
    a = config.optimizer.anneal
    steps = config.optimizer.steps if steps is None else steps
    frac = 1.0 if steps <= 1 else min(step / (steps - 1), 1.0)
    if a.schedule == "none":
        factor = 1.0
    elif a.schedule == "linear":
        factor = 1.0 - (1.0 - a.final_width_factor) * frac
    else:
        factor = a.final_width_factor**frac
    return np.asarray(w0, dtype=np.float64) * factor


def jitted_update(transform: optax.GradientTransformationExtraArgs,
                  described: str | None = None) -> Any:
    """``(g, state, u, value) -> (u + update, state)``: one step of the first-order
    optax ``transform`` (``update`` with ``value=`` and no Hessian, then
    :func:`optax.apply_updates`) as one jitted program.

    Parameters
    ----------
    transform : optax.GradientTransformationExtraArgs
        The optimiser (:attr:`analysis.optimize.optimizers.Optimizer.transform`).
    described : str, optional
        Everything ``transform`` is made from (:func:`update_description`): the
        program is then compiled once per process under it, ahead of time
        (:func:`analysis.stats._programs.program_call`). ``None``: ``jax.jit``.

    Returns
    -------
    callable
        ``step(g, state, u, value)``: the new parameters (before clipping to the
        bounds) and the new optimiser state, as JAX arrays. Fused by XLA, its rounding
        may differ from the eager update's in the last place (the demo's path: 3e-7
        relative after 60 steps, below every printed figure).
    """

    def step(g: Any, state: Any, u: Any, value: Any) -> tuple[Any, Any]:
        updates, state = transform.update(g, state, u, value=value, hessian=None)
        return optax.apply_updates(u, updates), state

    if described is None:
        return jax.jit(step)

    def run(g: Any, state: Any, u: Any, value: Any, *, optimizer: str) -> tuple[Any, Any]:
        return step(g, state, u, value)

    return lambda g, state, u, value: program_call("optax_update", run, g, state, u, value,
                                                  optimizer=described)


def update_description(config: Config) -> str:
    """What :func:`analysis.optimize.optimizers.make_optimizer` builds the optax
    optimiser from (``config.optimizer``, every field) and optax's version: the key of
    its update program (:func:`jitted_update`)."""
    return f"optax {optax.__version__}: {config.optimizer!r}"


class Coordinates:
    """Map trainable parameters to [0, 1]^P by their bounds, and back."""

    def __init__(self, config: Config, names: tuple[str, ...]) -> None:
        self.names = names
        # Unbounded entries (a learned score's weights) keep their own scale: u = theta.
        b = [config.bounds_of(n) or (np.nan, np.nan) for n in names]
        b = np.array(b, dtype=np.float64).reshape(len(names), 2)
        self.bounded = np.isfinite(b[:, 0])
        self.lower = np.where(self.bounded, b[:, 0], 0.0)
        self.upper = np.where(self.bounded, b[:, 1], 1.0)
        self.scale = self.upper - self.lower

    def clip(self, u: Any) -> np.ndarray:
        """``u`` clipped to [0, 1] where the parameter is bounded."""
        u = np.asarray(u, dtype=np.float64)
        return np.where(self.bounded, np.clip(u, 0.0, 1.0), u)

    def to_u(self, theta: Any) -> np.ndarray:
        """Unit coordinates of parameter values (in ``names`` order)."""
        return (np.asarray(theta) - self.lower) / self.scale

    def to_theta(self, u: Any) -> np.ndarray:
        """Parameter values of unit coordinates."""
        return self.lower + np.asarray(u) * self.scale

    def chain(self, u: Any, grad: Any, hess: Any = None) -> tuple[np.ndarray, Any]:
        """Gradient (and Hessian) in unit coordinates from those in the parameters
        (``u``: the point; the map is linear here, trainable edges' is not:
        :mod:`analysis.optimize.edgecoords`)."""
        g_u = np.asarray(grad) * self.scale
        return g_u, None if hess is None else np.asarray(hess) * np.outer(self.scale,
                                                                           self.scale)


def config_fingerprint(config: Config) -> str:
    """Hash of everything that changes the optimisation (the checkpoint must match it).

    Not ``optimizer.steps`` nor ``optimizer.replicas`` (the final report's bootstrap) nor
    ``optimizer.keep_best``, ``optimizer.validation.every`` / ``keep_best`` (what is
    evaluated after the loop): the
    step budget is the path's length, not the path
    (``--resume --steps N`` extends a run; the annealing keeps its first length)."""
    after = {"steps": True, "replicas": True, "keep_best": True,
             "validation": {"every", "keep_best"}}
    data = config.model_dump(
        mode="json", exclude={"output": True, "executor": True, "optimizer": after}
    )
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def save_checkpoint(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically, data only (see :mod:`analysis.optimize.checkpoint`)."""
    _ckpt.save_checkpoint(path, data)


def load_checkpoint(path: Path, fingerprint: str, **expect: Any) -> dict[str, Any]:
    """Read and validate a checkpoint, never unpickling (see :mod:`analysis.optimize.checkpoint`)."""
    return _ckpt.load_checkpoint(path, fingerprint, **expect)


class Optimization:
    """State and steps of one optimisation run (see the module docstring).

    ``Optimization(config, evaluator, outdir)``: :meth:`do_step` runs one pass and one
    optimiser update (and writes the checkpoint), :attr:`done` says when to stop,
    :meth:`final` evaluates the soft and hard objective at the final parameters.
    ``initial_observables``: the first step computes every observable (its states are
    :attr:`initial_states`, the plots' initial histograms); ``False`` (the command line
    without plots): only those the objective reads, as the steps after it (the same
    history bit for bit: :func:`analysis.optimize.objectives.step_observables`).
    """

    def __init__(
        self, config: Config, evaluator, outdir: Path, *, steps: int | None = None,
        initial_observables: bool = True,
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
        save_checkpoint(
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

    def hard(self, params: dict[str, float]) -> dict[str, Any]:
        """The hard-cut objective (width 0, integers rounded) at ``params``: one values-only pass."""
        return self.evaluate(self.hard_params(params), np.zeros_like(self.w0), order=0, strict=False)

    def hard_on(self, params: dict[str, float], part: str, *,
                uncertainty: bool = True) -> dict[str, Any]:
        """The hard-cut objective at ``params`` on the events of ``part`` ("all",
        "train", "held_out"; one values-only pass), with ``"uncertainty"``: its MC
        standard deviation over ``optimizer.replicas`` Poisson-bootstrap replicas from
        the same pass (:func:`analysis.optimize.objectives.bootstrap_uncertainty`; the
        replicas' totals come from one pass per run, :meth:`replica_totals`)."""
        kept = "all" if self.ev.part is None else self.ev.part[0]
        self._use_part(part)
        k = self.config.optimizer.replicas
        try:
            hp = self.hard_params(params)
            reps = None
            if k >= 2 and uncertainty:
                reps = self.ev.run_replicas(hp, widths=np.zeros_like(self.w0), replicas=k)
            if reps is None:
                res = self.hard(params)
                res["uncertainty"] = None
                if part == "all":
                    self.all_sumw = {n: st.sumw for n, st in self.last_states.items()}
                return res
            self.passes += 1
            self._last = None
            self.last_states = states = {n: r.state for n, r in reps.items()}
            if part == "all":  # every event's sum of weights (the plots' normalisation)
                self.all_sumw = {n: st.sumw for n, st in states.items()}
            res = objective_from_states(self.objective, states, order=0, strict=False)
            totals = self.replica_totals()
            sums = {n: np.vstack([totals[n].part(part), r.sums]) for n, r in reps.items()}
            res["uncertainty"] = bootstrap_uncertainty(self.objective, states, sums)
        finally:
            self._use_part(kept)
        return res

    def replica_totals(self) -> dict[str, Any]:
        """The bootstrap replicas' totals of every part (one pass, run once)."""
        if self._replica_totals is None:
            self._replica_totals = self.ev.run_replica_totals(
                self.fraction, replicas=self.config.optimizer.replicas)
            self.passes += 1
        return self._replica_totals

    def validation(self, initial: dict[str, float], final: dict[str, float],
                   initial_hard: dict[str, Any] | None = None) -> dict[str, Any]:
        """Hard-cut objective values at ``initial`` and ``final`` on all events, on the
        training and on the held-out part, and what they say (see
        :func:`analysis.optimize.status.validation_report`), with bootstrap replicas on
        all events at both points and on each part at the end (the gap's uncertainty):
        one values pass on the cached columns (:meth:`_validation_lanes`; with fewer
        than 2 replicas a pass per point and part). Sets
        :attr:`start_hard`. ``initial_hard``: :meth:`hard` at ``initial`` if already run
        (it is the training part's value with the split)."""
        from analysis.optimize.status import validation_report

        threshold = self.config.optimizer.validation.threshold if self.fraction else 2.0
        res = self._validation_lanes(initial, final, initial_hard)
        if res is None:
            res = self._validation_passes(initial, final, initial_hard)
        # the hard-cut value at the start on the loop's events: :meth:`hard`'s (same sums)
        start = res["train" if self.fraction is not None else "all"]["initial"]
        self.start_hard = {k: v for k, v in start.items() if k != "uncertainty"}
        return validation_report(res, self.fraction, threshold)

    def _validation_passes(self, initial: dict[str, float], final: dict[str, float],
                           initial_hard: dict[str, Any] | None) -> dict[str, Any]:
        """:meth:`validation`'s ``res`` from a pass per (point, part) (:meth:`hard_on`)."""
        res: dict[str, dict[str, Any]] = {
            "all": {"initial": self.hard_on(initial, "all"), "final": self.hard_on(final, "all")}}
        if self.fraction is not None:
            train0 = initial_hard if initial_hard is not None else self.hard_on(
                initial, "train", uncertainty=False)
            res["train"] = {"initial": {**train0, "uncertainty": None},
                            "final": self.hard_on(final, "train")}
            res["held_out"] = {"initial": self.hard_on(initial, "held_out", uncertainty=False),
                               "final": self.hard_on(final, "held_out")}
        return res

    def _validation_lanes(self, initial: dict[str, float], final: dict[str, float],
                          initial_hard: dict[str, Any] | None) -> dict[str, Any] | None:
        """:meth:`validation`'s ``res`` from ONE values pass: both points and every part
        are weight lanes of it, and so are the bootstrap replicas (and their totals if
        not yet run; :meth:`analysis.driver.runner.Evaluator.run_replica_lanes`). The
        same values as :meth:`hard_on` at each (point, part) up to rounding (~1e-16).
        ``None`` where the replicas do not run (fewer than 2)."""
        parts = ("all",) if self.fraction is None else ("all", "train", "held_out")
        # uncertainties as hard_on gives them: all events at both points, each part at the end
        wanted = {(0, "all"), (1, "all"), (1, "train"), (1, "held_out")}
        lanes = self._hard_lanes([initial, final], parts, wanted)
        if lanes is None:
            return None
        res: dict[str, dict[str, Any]] = {p: {} for p in parts}
        for (i, part), out in lanes.items():
            res[part]["initial" if i == 0 else "final"] = out
        if initial_hard is not None and "train" in res:  # the value the run reported
            res["train"]["initial"] = {**initial_hard, "uncertainty": None}
        return res

    def _hard_lanes(self, points: list[dict[str, float]], parts: tuple[str, ...],
                    wanted: set[tuple[int, str]] | None = None, *, values_only: bool = False
                    ) -> dict[tuple[int, str], dict[str, Any]] | None:
        """The hard-cut objective at each of ``points`` on each of ``parts`` from ONE
        values pass (weight lanes, :meth:`analysis.driver.runner.Evaluator.run_replica_lanes`):
        ``{(point index, part): objective_from_states(...) + {"uncertainty"}}``, the
        bootstrap uncertainty where ``(i, part)`` is in ``wanted`` (None: everywhere).
        Leaves :attr:`last_states` and :attr:`all_sumw` at the last point on all events
        where "all" is a part. ``None`` where the replicas do not run (fewer than 2).
        ``values_only``: no uncertainty anywhere, the fewest replicas the pass takes (2;
        their cost grows with the points: ~1 s a point with 50 on the demo's events)."""
        k = 2 if values_only else self.config.optimizer.replicas
        if k < 2:
            return None
        if values_only:
            wanted = set()
        hard = [self.hard_params(p) for p in points]
        need_totals = self._replica_totals is None and not values_only
        # only the observables the objective reads, as the steps (the report's
        # statistics come from the final pass)
        reads = None if self.reverse else step_observables(self.objective, self.plan, 0)
        lanes = self.ev.run_replica_lanes(hard, widths=np.zeros_like(self.w0), parts=parts,
                                          fraction=self.fraction, replicas=k,
                                          totals=need_totals, observables=reads)
        if lanes is None:
            return None
        self.passes += 1
        self._last = None
        if need_totals:
            self._replica_totals = {n: r.totals for n, r in lanes.items()}
        totals = self._replica_totals
        kept = "all" if self.ev.part is None else self.ev.part[0]
        res: dict[tuple[int, str], dict[str, Any]] = {}
        try:
            for (i, part) in lanes[next(iter(lanes))].lanes:
                states = {n: r.lanes[i, part].state for n, r in lanes.items()}
                self._use_part(part)
                out = objective_from_states(self.objective, states, order=0, strict=False)
                out["uncertainty"] = None
                if wanted is None or (i, part) in wanted:
                    sums = {n: np.vstack([totals[n].part(part), r.lanes[i, part].sums])
                            for n, r in lanes.items()}
                    out["replicas"] = bootstrap_values(self.objective, states, sums)
                    out["uncertainty"] = bootstrap_uncertainty(self.objective, states, sums)
                res[i, part] = out
        finally:
            self._use_part(kept)
        if "all" in parts:
            last = len(points) - 1
            states = {n: r.lanes[last, "all"].state for n, r in lanes.items()}
            self.last_states = states
            self.all_sumw = {n: st.sumw for n, st in states.items()}
        return res

    def validation_history(self) -> list[dict[str, Any]] | None:
        """The hard-cut objective at every step and at the end, in one values pass
        (:func:`analysis.optimize.keepbest.track_hard`: kept in :attr:`tracked`; with
        keep-best the parameters move to the best hard-cut point, which :meth:`final`
        then reports). Returns results.json's ``validation.history`` with
        ``optimizer.validation.every: N`` (or ``validation.keep_best``): steps 0, N,
        2N, ... and the end, on the training and the held-out part (see
        :func:`analysis.optimize.keepbest.validation_entries`); else None."""
        self.tracked = track_hard(self)
        val = self.config.optimizer.validation
        if val is None or (val.every is None and not val.keep_best):
            return None
        return validation_entries(self.tracked, val.every or 1)

    def status(
        self, final: dict[str, Any], initial_hard: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """How the run ended (:func:`analysis.optimize.status.run_status`)."""
        return run_status(self, final, initial_hard)

    @property
    def done(self) -> bool:
        return self.converged or self.stopped is not None or self.step >= self.opt_cfg.steps

    def final(self) -> dict[str, Any]:
        """Soft (final widths) and hard (width 0, integers rounded) objective at the final parameters.

        At most two passes: the soft one reuses the last step's states when the last
        update left the parameters unchanged; the hard one needs values only. The
        Hessian of the soft objective (how sharp the optimum is, per parameter, in
        parameter units) is computed only when asked for (``output.hessian``) or
        already part of every step (``method: newton``): a second-order pass costs
        about ten first-order ones.
        """
        # with keep_best the chosen step's parameters (at the final widths)
        params = self.params() if self.best_params is None else dict(self.best_params)
        widths = annealed_widths(
            self.w0, max(self.step - 1, 0), self.config, steps=self.anneal_steps
        )
        passes = self.passes
        order = 2 if self.config.output.hessian or self.order >= 2 else 1
        soft = self.evaluate(params, widths, order=order, strict=False)
        self.final_states = self.last_states
        hard_p = self.hard_params(params)
        hard = self.evaluate(hard_p, np.zeros_like(self.w0), order=0, strict=False)
        self.final_hard_states = self.last_states
        #: passes the final evaluations ran (1 or 2)
        self.final_passes = self.passes - passes

        def pack(r, p, w):
            out = {
                "parameters": p,
                "widths": [float(x) for x in w],
                "objective": r["objective"],
                "significance": r["significance"],
                "yields": r["yields"],
            }
            if "error" in r:
                out["error"] = r["error"]
            return out

        soft_out = pack(soft, params, widths)
        names = self.coords.names
        if soft["grad"] is not None:
            soft_out["gradient"] = {n: float(g) for n, g in zip(names, soft["grad"])}
        if soft["hess"] is not None:
            soft_out["hessian"] = {
                a: {b: float(soft["hess"][i, j]) for j, b in enumerate(names)}
                for i, a in enumerate(names)
            }
        return {
            "soft": soft_out,
            "hard": pack(hard, hard_p, np.zeros_like(self.w0)),
        }
