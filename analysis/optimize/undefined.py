"""An objective that becomes undefined during a run: refused at the start, a stop after it.

At step 0 an undefined objective (a term's ``check`` refusing the statistics, e.g. no
background yield; a ``python`` term returning NaN; an unusable likelihood model; a
non-finite value, gradient or Hessian) means the configuration is unusable: one line,
exit 2, as any bad input (:func:`refuse`, :func:`require_finite`). At a later step
``k`` the path has left the region where the objective is defined (a step too long on
a small sample: the background yield of a Drell-Yan sample with negative weights goes
negative, or no background event is kept), and the steps before it are good points:
the loop stops there (:attr:`analysis.optimize.loop.Optimization.stopped` holds
:func:`stop_message`), keeps the history of steps ``0 .. k-1`` and moves the
parameters back to step ``k - 1``'s (the last point where the objective is defined);
the normal end of the run (keep-best's hard-cut evaluation of every step, results.json,
plots) then runs on those points, so with keep-best the reported hard-cut objective is
never worse than the start's. The checkpoint on disk stays the one after step ``k - 1``
(a ``--resume`` takes step ``k`` again and stops there again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from analysis.config.terms import TermReturnError
from analysis.errors import DiffcoffeaError, LikelihoodError

__all__ = ["UNDEFINED", "kept", "reason", "refuse", "require_finite", "stop_message"]

#: the errors a step's objective raises where it is undefined at the step's point (the
#: statistics are fine, the objective cannot be formed from them); a term's ``check``
#: raises plain :class:`~analysis.errors.DiffcoffeaError`, which a step with
#: ``strict=False`` returns under ``"error"`` instead
UNDEFINED = (TermReturnError, LikelihoodError)


def kept(step: int, checkpoint: Path) -> str:
    """What a run stopped at ``step`` leaves: the checkpoint of the step before."""
    if step > 0:
        return f"the checkpoint after step {step - 1} is kept ({checkpoint})"
    return "no checkpoint was written"


def _not_finite(res: dict[str, Any]) -> str | None:
    """``"objective"``, ``"grad/hess of the objective"``...: what of ``res`` is not
    finite (None: all is)."""
    bad = [
        key
        for key in ("objective", "grad", "hess")
        if res.get(key) is not None and not np.all(np.isfinite(res[key]))
    ]
    if not bad:
        return None
    return "objective" if "objective" in bad else f"{'/'.join(bad)} of the objective"


def require_finite(res: dict[str, Any], step: int, checkpoint: Path) -> None:
    """Stop with one line if the objective or its derivatives at ``step`` are not finite.

    Raised before the update, so the checkpoint on disk is the last good one.
    """
    what = _not_finite(res)
    if what:
        raise DiffcoffeaError(
            f"optimize: step {step}: the {what} is not finite "
            f"(objective {res.get('objective')}); stopped, {kept(step, checkpoint)}"
        )


def refuse(err: Exception, step: int, checkpoint: Path) -> DiffcoffeaError:
    """The one-line error of an :data:`UNDEFINED` error at ``step`` (naming the step
    and the checkpoint kept), to raise."""
    return DiffcoffeaError(f"optimize: step {step}: {err}; stopped, {kept(step, checkpoint)}")


def _one_line(text: str, source: Any) -> str:
    """``text`` on one line, without the config's path and ``objective:`` in front (the
    stop line is about the objective of this config already)."""
    text = " ".join(str(text).split())
    for prefix in (f"{source}: ", "objective: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text


def reason(res: dict[str, Any] | None, source: Any, err: Exception | None = None
           ) -> str | None:
    """Why a step's objective is undefined, on one line (None: it is defined).

    Parameters
    ----------
    res : dict or None
        The step's :func:`analysis.optimize.objectives.objective_from_states` result
        (``strict=False``: a term's refusal under ``"error"``); None where it raised.
    source : str or Path
        The config's path (dropped from the front of the messages).
    err : Exception, optional
        The :data:`UNDEFINED` error the step raised.

    Returns
    -------
    str or None
        E.g. ``"background yield is 0 (datasets dy); ..."``, ``"the objective is not
        finite (nan)"``.
    """
    if err is not None:
        return _one_line(str(err), source)
    assert res is not None
    if res.get("error"):
        return _one_line(res["error"], source)
    what = _not_finite(res)
    if what is None:
        return None
    value = res.get("objective")
    return f"the {what} is not finite" + (f" ({value})" if what == "objective" else "")


def stop_message(step: int, why: str) -> str:
    """results.json's ``status.stopped`` (and the closing line after ``status: stopped:``)."""
    return f"objective undefined at step {step}: {why}"
