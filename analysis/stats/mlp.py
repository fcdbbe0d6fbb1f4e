"""A learned score: a small multilayer perceptron (equinox) of per-entry input columns.

``net = mlp(3, hidden=(16, 16), activation="tanh", seed=1)`` is an equinox module
(:class:`MLP`) whose only pytree leaves are float64 weights and biases, so it can sit
in ``theta`` beside cut values (``theta = {"cut": 0.5, "net": net}``) and be trained
by :func:`analysis.stats.derive` / :func:`analysis.stats.differentiable` (reverse mode
for its O(10^3) parameters). ``score(theta["net"], [pt, eta, btag], standard=st)`` is
the score of every entry (object or event): the inputs are standardised,
``z_k = (x_k - mean_k) / std_k`` (:class:`Standardisation`, data, not parameters,
e.g. from a first pass's merged moments), then ``h_0 = z``,
``h_l = activation(W_l h_(l-1) + b_l)`` for the hidden layers and
``score = W_L h_(L-1) + b_L`` (one linear output, no activation: cut it softly like
any variable, ``soft_cut(s, ">", theta["cut"], width)``). Layers are
``equinox.nn.Linear`` (weights ``(out, in)``); a hidden width list may vary.

:func:`to_arrays` / :func:`from_arrays` convert to and from a flat dict of numpy
arrays (``layers.0.weight``, ``layers.0.bias``, ...): data only, for npz files
(:mod:`analysis.select.weights`); :func:`from_arrays` checks every key, shape and value
against the network the configuration describes and raises a one-line
:class:`~analysis.errors.InputError` otherwise. Empty input (no entries) gives an
empty score.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis.errors import InputError
from analysis.spec.activations import ACTIVATION_NAMES
from analysis.stats._core import Moments
from analysis.stats._statefns import state_mean, state_std
from analysis.stats.jagged import Jagged

if TYPE_CHECKING:
    from analysis.stats._mlpnet import MLP

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "Standardisation",
    "from_arrays",
    "mlp",
    "score",
    "to_arrays",
]

ACTIVATIONS: dict[str, Callable[[Any], Any]] = {name: getattr(jax.nn, name) for name in ACTIVATION_NAMES}


def __getattr__(name: str) -> Any:
    # MLP, an equinox module, lives in analysis.stats._mlpnet: equinox (0.3-0.6 s to
    # import) loads when the class is first asked for, not for every config
    # (docs/explanation/performance.md)
    if name == "MLP":
        from analysis.stats._mlpnet import MLP

        return MLP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def mlp(
    n_inputs: int,
    *,
    hidden: Sequence[int] = (16, 16),
    activation: str = "tanh",
    seed: int = 0,
) -> MLP:
    """A new :class:`MLP`, float64, initialised by equinox from ``jax.random.PRNGKey(seed)``
    (the same seed gives the same weights).

    Parameters
    ----------
    n_inputs : int
        Number of inputs (``>= 1``).
    hidden : sequence of int, optional
        Keyword-only. Widths of the hidden layers (each ``>= 1``; default ``(16, 16)``).
    activation : str, optional
        Keyword-only. A key of :data:`ACTIVATIONS` (default ``"tanh"``).
    seed : int, optional
        Keyword-only. Seed of ``jax.random.PRNGKey`` (default 0).

    Returns
    -------
    MLP
        The network with float64 weights. ``ValueError`` (one line naming the argument)
        for a bad ``n_inputs``, ``hidden`` or ``activation``.
    """
    if isinstance(n_inputs, bool) or not isinstance(n_inputs, int) or n_inputs < 1:
        raise ValueError(f"stats.mlp: n_inputs: expected an integer >= 1, found {n_inputs!r}")
    sizes = [n_inputs, *hidden, 1]
    for h in hidden:
        if isinstance(h, bool) or not isinstance(h, int) or h < 1:
            raise ValueError(f"stats.mlp: hidden: expected integers >= 1, found {list(hidden)}")
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"stats.mlp: activation: expected one of {', '.join(ACTIVATIONS)}, found {activation!r}"
        )
    import equinox as eqx

    from analysis.stats._mlpnet import MLP

    keys = jax.random.split(jax.random.PRNGKey(seed), len(sizes) - 1)
    layers = tuple(
        eqx.nn.Linear(a, b, key=k, dtype=jnp.float64)
        for a, b, k in zip(sizes[:-1], sizes[1:], keys, strict=True)
    )
    return MLP(layers, activation)


class Standardisation(NamedTuple):
    """Per-input ``mean`` and ``std`` (arrays ``(n_inputs,)``): ``z = (x - mean) / std``.

    Data, not parameters (constants for the gradient). A zero or non-finite ``std``
    (a constant or empty input) counts as 1, a non-finite mean as 0.

    Parameters
    ----------
    mean : array
        ``(n_inputs,)`` means subtracted from the inputs (float64).
    std : array
        ``(n_inputs,)`` scales the inputs are divided by (float64).
    """

    mean: Any
    std: Any

    @classmethod
    def identity(cls, n_inputs: int) -> Standardisation:
        """No standardisation: means 0, scales 1, for ``n_inputs`` inputs."""
        return cls(np.zeros(n_inputs), np.ones(n_inputs))

    @classmethod
    def from_moments(cls, states: Sequence[Moments]) -> Standardisation:
        """From one merged :class:`~analysis.stats.Moments` state per input (a first pass)."""
        mean = np.array([float(state_mean(s)) for s in states])
        std = np.array([float(state_std(s)) for s in states])
        return cls(np.where(np.isfinite(mean), mean, 0.0), np.where(std > 0, std, 1.0))


def score(net: MLP, columns: Sequence[Any], *, standard: Standardisation | None = None) -> Any:
    """The network's score of every entry: ``columns`` are the inputs, one array per
    input, all of the same length (flat arrays ``(N,)``, or :class:`Jagged` lists with
    the same offsets, e.g. one per jet: the result is then :class:`Jagged` too).
    float64; differentiable in ``net``'s weights (and in the columns).

    Parameters
    ----------
    net : MLP
        The network (from :func:`mlp`).
    columns : sequence of arrays or Jagged
        One input per network input, all of the same length: flat arrays ``(N,)``, or
        :class:`Jagged` lists with the same offsets.
    standard : Standardisation or None, optional
        Keyword-only. Applied to the inputs, ``z = (x - mean) / std``, before the network
        (default None: the inputs as they are).

    Returns
    -------
    jax.Array or Jagged
        float64 ``net(z)`` per entry: a JAX array ``(N,)`` for flat columns, a
        :class:`Jagged` with the columns' offsets for lists; empty for empty input.
    """
    if len(columns) != net.n_inputs:
        raise ValueError(
            f"stats.score: expected {net.n_inputs} input columns for this network, "
            f"found {len(columns)}"
        )
    jagged = next((c for c in columns if isinstance(c, Jagged)), None)
    flat = [c.values if isinstance(c, Jagged) else c for c in columns]
    x = jnp.stack([jnp.asarray(c, dtype=jnp.float64).reshape(-1) for c in flat], axis=-1)
    if standard is not None:
        mean = jnp.asarray(standard.mean, dtype=jnp.float64)
        std = jnp.asarray(standard.std, dtype=jnp.float64)
        std = jnp.where(jnp.isfinite(std) & (std != 0), std, 1.0)
        x = (x - jnp.where(jnp.isfinite(mean), mean, 0.0)) / std
    out = jax.vmap(net)(x) if x.shape[0] else jnp.zeros(0, dtype=jnp.float64)
    if jagged is not None:
        return Jagged(out, jagged.offsets)
    return out


def _named_leaves(net: MLP) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for i, layer in enumerate(net.layers):
        out.append((f"layers.{i}.weight", layer.weight))
        out.append((f"layers.{i}.bias", layer.bias))
    return out


def to_arrays(net: MLP) -> dict[str, np.ndarray]:
    """The weights and biases as ``{"layers.I.weight": (out, in), "layers.I.bias": (out,)}``
    float64 numpy arrays (what an npz file holds)."""
    return {k: np.asarray(v, dtype=np.float64) for k, v in _named_leaves(net)}


def from_arrays(arrays: Mapping[str, Any], like: MLP, *, source: str = "weights") -> MLP:
    """``like`` with its weights replaced by ``arrays`` (as :func:`to_arrays` gives).

    Every key of ``like`` must be present with the same shape and finite values, and
    no other key: otherwise :class:`~analysis.errors.InputError`, one line naming
    ``source`` (e.g. the file), the key and what was expected."""
    expected = dict(_named_leaves(like))
    extra = sorted(set(arrays) - set(expected))
    if extra:
        raise InputError(
            f"{source}: unexpected key {extra[0]!r}; expected only {', '.join(expected)}"
        )
    new = []
    for key, old in expected.items():
        if key not in arrays:
            raise InputError(f"{source}: missing key {key!r} (shape {tuple(old.shape)})")
        a = np.asarray(arrays[key])
        if a.dtype.kind not in "iuf":
            raise InputError(f"{source}: {key}: expected real numbers, found dtype {a.dtype}")
        if a.shape != tuple(old.shape):
            raise InputError(
                f"{source}: {key}: expected shape {tuple(old.shape)} for the configured "
                f"network (inputs {like.n_inputs}, hidden {list(like.hidden)}), found {a.shape}"
            )
        bad = np.flatnonzero(~np.isfinite(a.reshape(-1)))
        if bad.size:
            index = np.unravel_index(bad[0], a.shape)
            raise InputError(
                f"{source}: {key}[{','.join(map(str, index))}] = {a.reshape(-1)[bad[0]]}: "
                "expected finite weights"
            )
        new.append(jnp.asarray(a, dtype=jnp.float64))
    import equinox as eqx

    return eqx.tree_at(lambda n: [v for _, v in _named_leaves(n)], like, new)
