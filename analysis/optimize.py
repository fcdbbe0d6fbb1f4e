"""The optimisation loop, the grid scan, and their command-line entry points.

Each step is one pass over all chunks (any coffea executor) giving the objective
and its exact gradient (and, for ``method: newton``, its Hessian) with respect to
the trainable parameters; then an optax update.

- Coordinates: the optimiser sees ``u = (theta - lower) / (upper - lower)``, so one
  learning rate suits a pT threshold in GeV and a b-tag score in [0, 1].
- Bounds: projection. After each update ``u`` is clipped to [0, 1]; parameters
  never leave their bounds.
- Annealing: every cut width follows ``w_k = w_0 * f**(k / (steps - 1))``
  (``exponential``) or ``w_0 * (1 - (1 - f) k / (steps - 1))`` (``linear``), with
  ``f = anneal.final_width_factor``, so soft cuts approach hard ones.
- Convergence: stop when ``|J_k - J_{k-window}| <= tolerance * max(|J_k|, 1e-12)``
  after annealing has finished (annealing itself moves the objective).
- Newton (``method: newton``): the exact Hessian comes from the same pass (chunk
  Hessians merge like Jacobians); a trust region in unit coordinates with the
  usual actual/predicted-decrease ratio test accepts or rejects each step.
- Stochastic mode: a step uses ``chunks_per_step`` chunks (at least one of every
  dataset) drawn with a generator seeded by ``(seed, step)``, so a resumed run
  draws the same chunks.
- Checkpoint: after every step ``checkpoint.pkl`` (parameters, optimiser state,
  history) is written atomically in the output directory; ``--resume`` continues
  from it and reaches the same final parameters as an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from analysis.config import Config, load_config
from analysis.errors import ConfigError, DiffcoffeaError
from analysis.objectives import Objective
from analysis.plan import initial_widths
from analysis.results import DatasetState, dataset_report, derivatives

CHECKPOINT = "checkpoint.pkl"


# --- one pass: objective with derivatives ---------------------------------------


def objective_from_states(
    objective: Objective, states: dict[str, DatasetState], *, order: int = 1, strict: bool = True
) -> dict[str, Any]:
    """Objective value, gradient (and Hessian) from merged per-dataset states.

    Also returns the significance (if configured) and each dataset's yield, for
    the history. Where the objective is undefined (zero background yield) it raises
    :class:`DiffcoffeaError`, or with ``strict=False`` returns ``None`` values and
    the message under ``"error"`` (for the final report).
    """
    values, jacs, hesses = {}, {}, {}
    for name, st in states.items():
        values[name], jacs[name], hesses[name] = st.taylor()
    sumw = {name: st.sumw for name, st in states.items()}
    events = {name: st.events for name, st in states.items()}
    stats0 = objective.stats(jax.tree_util.tree_map(jnp.asarray, values), sumw, events)
    yields = {n: float(stats0[n]["yield"]) for n in states}
    try:
        objective.check(stats0)
    except DiffcoffeaError as err:
        if strict:
            raise
        return {
            "objective": None,
            "grad": None,
            "hess": None,
            "significance": None,
            "yields": yields,
            "error": str(err),
        }

    def fn(s):
        stats = objective.stats(s, sumw, events)
        out = {"objective": objective.value(stats)}
        if objective.signal and objective.background:
            out["significance"] = objective.significance(stats)
        return out

    val, grad, hess = derivatives(fn, values, jacs, hesses if order >= 2 else None, order=order)
    return {
        "objective": float(val["objective"]),
        "grad": np.asarray(grad["objective"], dtype=np.float64),
        "hess": None if hess is None else np.asarray(hess["objective"], dtype=np.float64),
        "significance": float(val["significance"]) if "significance" in val else None,
        "yields": yields,
    }


# --- the optimiser ---------------------------------------------------------------


def make_optimizer(config: Config) -> optax.GradientTransformation:
    """Any optax optimiser by name, with an optional optax schedule for the learning rate."""
    opt = config.optimizer
    where = f"{config.source}: optimizer"
    factory = getattr(optax, opt.name, None)
    if factory is None or not callable(factory) or opt.name.startswith("_"):
        import difflib

        names = [
            n
            for n in (
                "adam",
                "adamw",
                "sgd",
                "rmsprop",
                "adagrad",
                "lion",
                "lbfgs",
                "nadam",
                "adabelief",
                "yogi",
                "radam",
                "amsgrad",
                "adamax",
                "novograd",
                "fromage",
                "lamb",
                "lars",
                "sm3",
                "noisy_sgd",
                "adafactor",
                "adadelta",
            )
            if hasattr(optax, n)
        ]
        close = difflib.get_close_matches(opt.name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; e.g. {', '.join(names[:6])}"
        raise ConfigError(f"{where}.name: unknown optax optimiser {opt.name!r}{hint}")
    lr: Any = opt.learning_rate
    if opt.schedule is not None:
        sched = getattr(optax, opt.schedule.name, None)
        if sched is None or not callable(sched):
            raise ConfigError(
                f"{where}.schedule.name: unknown optax schedule {opt.schedule.name!r}"
            )
        kwargs = dict(opt.schedule.kwargs)
        kwargs.setdefault("init_value", opt.learning_rate)
        try:
            lr = sched(**kwargs)
        except TypeError as err:
            raise ConfigError(f"{where}.schedule: {err}") from None
    try:
        return factory(learning_rate=lr, **opt.kwargs)
    except TypeError as err:
        raise ConfigError(f"{where}: cannot build optax.{opt.name}: {err}") from None


def annealed_widths(w0: np.ndarray, step: int, config: Config) -> np.ndarray:
    """Cut widths at ``step`` (see the module docstring)."""
    a = config.optimizer.anneal
    steps = config.optimizer.steps
    frac = 1.0 if steps <= 1 else min(step / (steps - 1), 1.0)
    if a.schedule == "none":
        factor = 1.0
    elif a.schedule == "linear":
        factor = 1.0 - (1.0 - a.final_width_factor) * frac
    else:
        factor = a.final_width_factor**frac
    return np.asarray(w0, dtype=np.float64) * factor


class Coordinates:
    """Map trainable parameters to [0, 1]^P by their bounds, and back."""

    def __init__(self, config: Config, names: tuple[str, ...]) -> None:
        self.names = names
        b = np.array([config.bounds_of(n) for n in names], dtype=np.float64).reshape(len(names), 2)
        self.lower, self.upper = b[:, 0], b[:, 1]
        self.scale = self.upper - self.lower

    def to_u(self, theta: np.ndarray) -> np.ndarray:
        return (np.asarray(theta) - self.lower) / self.scale

    def to_theta(self, u: np.ndarray) -> np.ndarray:
        return self.lower + np.asarray(u) * self.scale


def newton_update(g_u: np.ndarray, h_u: np.ndarray, radius: float = 0.1) -> np.ndarray:
    """A damped Newton step in unit coordinates, inside a trust region of ``radius``.

    ``(H + lambda I) d = -g`` with ``lambda`` making the matrix positive definite; the
    step is shortened to ``radius`` if longer.
    """
    h = 0.5 * (h_u + h_u.T)
    eig = np.linalg.eigvalsh(h) if h.size else np.zeros(0)
    lam = max(0.0, -float(eig.min(initial=0.0))) + 1e-6 * max(
        1.0, float(np.abs(eig).max(initial=0.0))
    )
    d = -np.linalg.solve(h + lam * np.eye(len(g_u)), g_u)
    norm = float(np.linalg.norm(d))
    return d * (radius / norm) if norm > radius else d


def config_fingerprint(config: Config) -> str:
    """Hash of everything that changes the optimisation (the checkpoint must match it)."""
    data = config.model_dump(mode="json", exclude={"output": True, "executor": True})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def save_checkpoint(path: Path, data: dict[str, Any]) -> None:
    """Pickle ``data`` to ``path`` atomically (write a temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path, fingerprint: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)
    except FileNotFoundError:
        raise DiffcoffeaError(f"{path}: no checkpoint to resume from") from None
    except Exception as err:
        raise DiffcoffeaError(f"{path}: unreadable checkpoint ({type(err).__name__})") from None
    if data.get("fingerprint") != fingerprint:
        raise DiffcoffeaError(
            f"{path}: checkpoint was made with a different config; use another --output or drop --resume"
        )
    return data


class Optimization:
    """State and steps of one optimisation run (used by the CLI and the tests)."""

    def __init__(
        self, config: Config, evaluator, outdir: Path, *, steps: int | None = None
    ) -> None:
        self.config = config
        self.ev = evaluator
        self.plan = evaluator.plan
        self.objective = Objective(config, self.plan)
        self.outdir = Path(outdir)
        if steps is not None:
            config.optimizer.steps = steps
        self.opt_cfg = config.optimizer
        names = self.plan.trainable_names
        if not names:
            raise ConfigError(
                f"{config.source}: parameters: nothing to optimise (no trainable parameter)"
            )
        self.coords = Coordinates(config, names)
        self.optimizer = make_optimizer(config)
        self.w0 = np.asarray(initial_widths(config), dtype=np.float64)
        self.fingerprint = config_fingerprint(config)
        self.order = 2 if self.opt_cfg.method == "newton" else 1
        init = config.initial_params()
        self.u = np.clip(self.coords.to_u([init[n] for n in names]), 0.0, 1.0)
        if self.opt_cfg.method == "newton":
            # Trust-region state: the last accepted point with its gradient and Hessian.
            self.opt_state = {
                "radius": np.float64(0.1),
                "u": None,
                "obj": None,
                "g": None,
                "h": None,
                "d": None,
                "pred": None,
            }
        else:
            self.opt_state = self.optimizer.init(jnp.asarray(self.u))
        self.step = 0
        self.history: list[dict[str, Any]] = []
        self.converged = False

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
        data = load_checkpoint(self.outdir / CHECKPOINT, self.fingerprint)
        self.step = data["step"]
        self.u = np.asarray(data["u"], dtype=np.float64)
        state = data["opt_state"]
        self.opt_state = (
            state if self.opt_cfg.method == "newton" else jax.tree_util.tree_map(jnp.asarray, state)
        )
        self.history = data["history"]
        self.converged = data.get("converged", False)

    def checkpoint(self) -> None:
        save_checkpoint(
            self.outdir / CHECKPOINT,
            {
                "fingerprint": self.fingerprint,
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
    ) -> dict[str, Any]:
        states = self.ev.run(params, widths=widths, order=order, chunks=chunks)
        self.last_states = states
        return objective_from_states(self.objective, states, order=order, strict=strict)

    def do_step(self) -> dict[str, Any]:
        """One pass and one update; appends to the history and writes the checkpoint."""
        start = time.perf_counter()
        k = self.step
        widths = annealed_widths(self.w0, k, self.config)
        params = self.params()
        res = self.evaluate(params, widths, order=self.order, chunks=self._chunks_for(k))
        g_u = res["grad"] * self.coords.scale
        if self.opt_cfg.method == "newton":
            h_u = res["hess"] * np.outer(self.coords.scale, self.coords.scale)
            self.u = self._newton_step(res["objective"], g_u, h_u)
        else:
            updates, self.opt_state = self.optimizer.update(
                jnp.asarray(g_u), self.opt_state, jnp.asarray(self.u)
            )
            self.u = np.clip(
                np.asarray(optax.apply_updates(jnp.asarray(self.u), updates)), 0.0, 1.0
            )
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

    def _newton_step(self, obj: float, g_u: np.ndarray, h_u: np.ndarray) -> np.ndarray:
        """A trust-region Newton step (one pass per step, as first order).

        The ratio ``rho`` of the actual to the predicted decrease of the last step
        decides: ``rho < 0`` rejects it (back to the last accepted point, radius / 4),
        ``rho < 1/4`` accepts but shrinks the radius, ``rho > 3/4`` with a step at the
        radius widens it (up to 0.5 in unit coordinates). With annealing the
        objectives of successive steps also differ by the change of widths.
        """
        st = self.opt_state
        radius = float(st["radius"])
        if st["obj"] is None:
            accept = True
        else:
            rho = (st["obj"] - obj) / max(float(st["pred"]), 1e-300)
            accept = rho >= 0
            if rho < 0.25:
                radius /= 4.0
            elif rho > 0.75 and np.linalg.norm(st["d"]) >= 0.99 * radius:
                radius = min(2.0 * radius, 0.5)
        if accept:
            st = {"u": np.array(self.u), "obj": obj, "g": g_u, "h": h_u}
        d = newton_update(st["g"], st["h"], radius=radius)
        d = np.clip(st["u"] + d, 0.0, 1.0) - st["u"]  # the step actually taken (bounds)
        pred = -(float(st["g"] @ d) + 0.5 * float(d @ st["h"] @ d))
        self.opt_state = {**st, "radius": np.float64(radius), "d": d, "pred": np.float64(pred)}
        return st["u"] + d

    def _converged(self) -> bool:
        w = self.opt_cfg.window
        annealed = self.opt_cfg.anneal.schedule == "none" or self.step >= self.opt_cfg.steps
        if not annealed or len(self.history) <= w:
            return False
        a, b = self.history[-1]["objective"], self.history[-1 - w]["objective"]
        return abs(a - b) <= self.opt_cfg.tolerance * max(abs(a), 1e-12)

    @property
    def done(self) -> bool:
        return self.converged or self.step >= self.opt_cfg.steps

    def final(self) -> dict[str, Any]:
        """Soft (final widths) and hard (width 0, integers rounded) objective at the final parameters."""
        params = self.params()
        widths = annealed_widths(self.w0, max(self.step - 1, 0), self.config)
        # Second order at the optimum costs nothing extra in passes: its Hessian tells
        # how sharp the optimum is (per parameter, in parameter units).
        soft = self.evaluate(params, widths, order=2, strict=False)
        self.final_states = self.last_states
        hard_p = self.hard_params(params)
        hard = self.evaluate(hard_p, np.zeros_like(self.w0), strict=False)

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
        if soft["grad"] is not None:
            names = self.coords.names
            soft_out["gradient"] = {n: float(g) for n, g in zip(names, soft["grad"])}
            soft_out["hessian"] = {
                a: {b: float(soft["hess"][i, j]) for j, b in enumerate(names)}
                for i, a in enumerate(names)
            }
        return {
            "soft": soft_out,
            "hard": pack(hard, hard_p, np.zeros_like(self.w0)),
        }


# --- grid scan ----------------------------------------------------------------------


def parse_grid(items: list[str], config: Config) -> dict[str, np.ndarray]:
    """``["name=lo:hi:n", ...]`` to ``{name: values}`` (inclusive, evenly spaced)."""
    grid: dict[str, np.ndarray] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        parts = spec.split(":")
        try:
            if not sep or len(parts) != 3:
                raise ValueError
            lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
            if n < 1:
                raise ValueError
        except ValueError:
            raise DiffcoffeaError(
                f"--grid {item!r}: expected NAME=LOW:HIGH:N, e.g. jet_pt_min=20:100:17"
            ) from None
        if name not in config.parameters:
            raise DiffcoffeaError(
                f"--grid {item!r}: unknown parameter {name!r}; parameters: {', '.join(config.parameters)}"
            )
        grid[name] = np.linspace(lo, hi, n)
    if not grid:
        raise DiffcoffeaError("scan: give at least one --grid NAME=LOW:HIGH:N")
    return grid


def scan_states(evaluator, thetas: np.ndarray) -> dict[str, DatasetState]:
    """States of every grid point (rows of ``thetas``: full parameter vectors), hard cuts, one pass."""
    from analysis.kernel import grid_state
    from analysis.runner import empty_columns
    from processors import DiffProcessor

    plan = evaluator.plan
    zeros = np.zeros(plan.n_widths)
    proc = DiffProcessor(plan, thetas, zeros, evaluator.weight_branches, order=0, grid=True)
    return evaluator.process(proc, lambda: grid_state(empty_columns(plan), plan, thetas, zeros))


def scan(
    config: Config, evaluator, grid: dict[str, np.ndarray], *, batch: int = 4096
) -> dict[str, Any]:
    """Hard-cut objective on the Cartesian grid; all points computed in the same pass.

    Points are evaluated per chunk with ``vmap`` (in batches, to bound memory).
    """
    objective = Objective(config, evaluator.plan)
    plan = evaluator.plan
    init = config.initial_params()
    names = list(grid)
    points = np.array(list(itertools.product(*(grid[n] for n in names))), dtype=np.float64)
    thetas = np.tile(np.array([init[n] for n in plan.param_names]), (len(points), 1))
    for j, n in enumerate(names):
        thetas[:, plan.param_names.index(n)] = points[:, j]
    states = scan_states(evaluator, thetas)
    values = {n: st.taylor()[0] for n, st in states.items()}
    sumw = {n: st.sumw for n, st in states.items()}
    events = {n: st.events for n, st in states.items()}

    def one(v):
        stats = objective.stats(v, sumw, events)
        return objective.value(stats), stats

    vals = jax.tree_util.tree_map(jnp.asarray, values)
    objs, stats = jax.vmap(one)(vals)
    objs = np.asarray(objs)
    bkg = (
        sum(np.asarray(stats[n]["yield"]) for n in objective.background)
        if objective.background
        else None
    )
    valid = np.isfinite(objs) & (bkg > 0 if bkg is not None else True)
    sig = None
    if objective.signal and objective.background:
        sig = np.asarray(
            jax.vmap(lambda v: objective.significance(objective.stats(v, sumw, events)))(vals)
        )
    best = int(np.nanargmin(np.where(valid, objs, np.inf))) if valid.any() else None
    return {
        "parameters": names,
        "points": points.tolist(),
        "objective": [float(x) if v else None for x, v in zip(objs, valid)],
        "significance": None
        if sig is None
        else [float(x) if v else None for x, v in zip(sig, valid)],
        "best": None
        if best is None
        else {
            "parameters": {n: float(points[best, j]) for j, n in enumerate(names)},
            "objective": float(objs[best]),
            "significance": None if sig is None else float(sig[best]),
        },
        "n_points": len(points),
        "passes": 1,
    }


# --- CLI entry points -----------------------------------------------------------


def run_optimize(args) -> int:
    from analysis.cli import make_evaluator, output_dir, write_json
    from analysis.plots import plot_histograms, plot_history

    config = load_config(args.config)
    outdir = output_dir(config, args)
    quiet = args.quiet
    args.quiet = True  # per-pass coffea bars would drown the step bar
    with make_evaluator(config, args) as ev:
        run = Optimization(config, ev, outdir, steps=args.steps)
        if args.resume:
            run.resume()
        elif (outdir / CHECKPOINT).exists():
            (outdir / CHECKPOINT).unlink()
        initial_params = config.initial_params()
        _loop(run, quiet)
        final = run.final()
        report = {
            "config": str(config.source),
            "trainable": list(run.coords.names),
            "bounds": {
                n: [float(lo), float(hi)]
                for n, lo, hi in zip(run.coords.names, run.coords.lower, run.coords.upper)
            },
            "optimizer": config.optimizer.model_dump(mode="json"),
            "steps_run": run.step,
            "passes": run.step + 2,
            "converged": run.converged,
            "history": run.history,
            "final": final,
            "parameters": final["soft"]["parameters"],
            "datasets": {n: dataset_report(run.final_states[n], run.plan) for n in config.datasets},
            "faults": ev.faults_report(),
        }
        write_json(outdir / "results.json", report)
        if not args.no_plots:
            plot_history(run.history, outdir)
            if config.observables:
                plot_histograms(
                    ev, config, initial_params, run.w0, final["hard"]["parameters"], outdir
                )
    if not quiet:
        _print_final(report, outdir)
    return 0


def _loop(run: Optimization, quiet: bool) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [
        TextColumn("[bold blue]optimize"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("objective {task.fields[obj]}"),
        TextColumn("step {task.fields[dt]}"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, disable=quiet) as bar:
        task = bar.add_task("opt", total=run.opt_cfg.steps, completed=run.step, obj="-", dt="-")
        while not run.done:
            entry = run.do_step()
            bar.update(
                task,
                completed=run.step,
                obj=f"{entry['objective']:.6g}",
                dt=f"{entry['wall_time_s']:.2f}s",
            )


def _print_final(report: dict[str, Any], outdir: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(
        title=f"after {report['steps_run']} steps ({report['passes']} passes over the data)",
        title_justify="left",
    )
    t.add_column("")
    t.add_column("soft", justify="right")
    t.add_column("hard (width 0)", justify="right")
    soft, hard = report["final"]["soft"], report["final"]["hard"]
    fmt = lambda x: "-" if x is None else f"{x:.6g}"  # noqa: E731
    t.add_row("objective", fmt(soft["objective"]), fmt(hard["objective"]))
    t.add_row("significance", fmt(soft["significance"]), fmt(hard["significance"]))
    for n in report["trainable"]:
        t.add_row(n, fmt(soft["parameters"][n]), fmt(hard["parameters"][n]))
    console.print(t)
    from analysis.report import print_faults

    print_faults(report.get("faults"), console)
    console.print(f"wrote {outdir / 'results.json'} and plots in {outdir}")


def run_scan(args) -> int:
    from analysis.cli import make_evaluator, output_dir, write_json

    config = load_config(args.config)
    grid = parse_grid(args.grid, config)
    outdir = output_dir(config, args)
    start = time.perf_counter()
    with make_evaluator(config, args) as ev:
        result = scan(config, ev, grid)
        result["faults"] = ev.faults_report()
    result["wall_time_s"] = time.perf_counter() - start
    write_json(outdir / "scan.json", result)
    results = outdir / "results.json"
    if results.exists():  # keep the scan beside an optimisation's results
        data = json.loads(results.read_text())
        data["scan"] = result
        write_json(results, data)
    if not args.quiet:
        best = result["best"]
        print(f"{result['n_points']} grid points in one pass; best: {best}")
        print(f"wrote {outdir / 'scan.json'}")
    return 0
