"""User loss functions for the ``python`` objective term, as a user would write them.

Referenced from test configs as ``tests.userlosses:<name>``. Each takes the
statistics mapping (``stats[dataset]`` with ``yield``, ``mc_variance``, the
observables, ...) and returns a JAX scalar to minimise.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp

# Environment variable read by :func:`fails_when_tight`: the signal yield below which it raises.
FAIL_BELOW = "DIFFCOFFEA_TEST_FAIL_BELOW"


def soft_ratio(stats):
    """-s / sqrt(b + 1) plus a pull of the mean signal jet pT to 60 GeV (mixes yields and observables)."""
    s = stats["ttbar"]["yield"]
    b = stats["dy"]["yield"]
    pull = 1e-3 * (stats["ttbar"]["jet_pt"]["mean"] - 60.0) ** 2
    return -s / jnp.sqrt(b + 1.0) + pull


def signal_yield(stats):
    """The signal yield (scaled): minimising it tightens every cut at each step."""
    return 1e-3 * stats["ttbar"]["yield"]


def fails_when_tight(stats):
    """:func:`signal_yield`, raising once the signal yield drops below ``$DIFFCOFFEA_TEST_FAIL_BELOW``.

    Only concrete (non-traced) values are checked: the pipeline evaluates the
    objective once with plain values at every step, and a traced value has no
    number to compare.
    """
    y = stats["ttbar"]["yield"]
    limit = os.environ.get(FAIL_BELOW)
    if limit is not None and not isinstance(y, jax.core.Tracer) and float(y) < float(limit):
        raise ValueError(f"signal yield {float(y):.6g} fell below {limit}")
    return signal_yield(stats)


# Not callable: a config naming it must be rejected.
NOT_CALLABLE = 42
