"""Config schema of the optimisation: optimiser, schedule, annealing, objective, output.

Pydantic v2 models of :class:`analysis.config.loader.Config`'s ``optimizer``,
``objective`` (terms: :mod:`analysis.config.terms`) and ``output``. Split out of
:mod:`analysis.config.loader`, which re-exports every name.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from analysis.config.schema import _fail, _Model
from analysis.config.terms import ObjectiveTerm
from analysis.limits import MAX_REPLICAS

__all__ = [
    "AnnealConfig",
    "ObjectiveConfig",
    "ObjectiveTermConfig",
    "OptimizerConfig",
    "OutputConfig",
    "ScheduleConfig",
    "ValidationConfig",
]


def _finite_kwargs(cls: type, v: dict[str, Any]) -> dict[str, Any]:
    """Shared field validator: numbers passed on to optax must be finite (kwargs are untyped)."""
    for key, value in v.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise _fail(str(key), f"expected a finite number, got {value}")
    return v


class OutputConfig(_Model):
    """Where results are written."""

    dir: str = "results"
    # optimize: the soft objective's Hessian at the final parameters in results.json
    # (a second-order pass, ~10x a step; always there with method: newton)
    hessian: bool = False


#: optax schedule arguments that count steps and must be positive integers (a
#: ``decay_steps: 0`` was a traceback in optax on the first step).
STEP_KWARGS = ("decay_steps", "transition_steps")


class ScheduleConfig(_Model):
    """An optax learning-rate schedule: ``optax.<name>(**kwargs)``."""

    name: str
    kwargs: dict[str, Any] = {}

    _kwargs = field_validator("kwargs")(_finite_kwargs)

    @field_validator("kwargs")
    @classmethod
    def _steps(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in STEP_KWARGS:
            value = v.get(key)
            if key in v and (isinstance(value, bool) or not isinstance(value, (int, float))
                             or not float(value).is_integer() or value < 1):
                raise _fail(key, f"expected a whole number of steps >= 1, got {value!r}")
        return v


class AnnealConfig(_Model):
    """Annealing of cut widths from their configured value to value * final_width_factor."""

    final_width_factor: float = Field(default=0.1, gt=0, le=1)
    schedule: Literal["exponential", "linear", "none"] = "exponential"
    # the schedule's length in steps (default: optimizer.steps). Shorter than the step
    # budget leaves steps at the final widths, where the convergence criterion can be met
    # (it compares objectives at the same widths only).
    steps: int | None = Field(default=None, ge=1)


class ValidationConfig(_Model):
    """The validation split (:mod:`analysis.pipeline.split`): the optimisation sees only the
    training events (weights x 1/(1 - fraction)); the hard-cut objective is evaluated on
    both parts at the start and the end, and with ``every: N`` at every N-th step
    (results.json's ``validation.history``); ``keep_best`` reports the step with the best
    held-out hard-cut objective instead of the last (the default already does:
    ``optimizer.keep_best``)."""

    fraction: float = Field(gt=0, lt=1)
    # |gap| / its MC standard deviation above which the report says the optimisation
    # fits the simulation's fluctuations
    threshold: float = Field(default=2.0, gt=0)
    # the hard-cut objective on both parts at steps 0, N, 2N, ... and the end (None: the
    # start and the end only)
    every: int | None = Field(default=None, ge=1)
    keep_best: bool = False

    @model_validator(mode="before")
    @classmethod
    def _fraction_first(cls, data: Any) -> Any:
        # without a held-out part there is no step to call best, nor anything to record
        if isinstance(data, dict) and data.get("fraction") is None:
            for key in ("keep_best", "every"):
                if data.get(key) not in (None, False):
                    raise _fail(key, "needs optimizer.validation.fraction (the held-out "
                                     "part it is measured on), e.g. fraction: 0.3")
        return data


class OptimizerConfig(_Model):
    """Optimiser settings for parameter training."""

    name: str = "adam"
    learning_rate: float = Field(default=0.05, gt=0)
    # the learned scores' weights (analysis.optimize.scoreopt); default: learning_rate
    score_learning_rate: float | None = Field(default=None, gt=0)
    steps: int = Field(default=60, ge=0)
    schedule: ScheduleConfig | None = None
    kwargs: dict[str, Any] = {}
    anneal: AnnealConfig = AnnealConfig()

    _kwargs = field_validator("kwargs")(_finite_kwargs)
    tolerance: float = Field(default=1e-4, ge=0)
    window: int = Field(default=5, ge=1)
    stochastic: bool = False
    chunks_per_step: int | None = Field(default=None, ge=1)
    seed: int = 0
    method: Literal["first_order", "newton"] = "first_order"
    # the validation split; None (the default): every event trains
    validation: ValidationConfig | None = None
    # Poisson-bootstrap replicas for the hard-cut objective's MC uncertainty (0: none)
    replicas: int = Field(default=50, ge=0, le=MAX_REPLICAS)
    # report the step with the best hard-cut objective (held-out part with validation,
    # else the training events), never a point worse than the start; false: the last
    # point (analysis.optimize.keepbest)
    keep_best: bool = True


# One class per objective term (validation and value), told apart by ``type``.
ObjectiveTermConfig = ObjectiveTerm


class ObjectiveConfig(_Model):
    """The objective: a weighted sum of terms."""

    terms: list[ObjectiveTerm] = Field(min_length=1)
