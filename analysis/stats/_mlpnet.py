"""The equinox module of :mod:`analysis.stats.mlp` (:class:`MLP`), apart so that
importing :mod:`analysis.stats` does not load equinox: ``analysis.stats.MLP`` and
``analysis.stats.mlp.MLP`` import this module when first asked for (its public name
stays ``analysis.stats.mlp.MLP``, which pickles find)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax

__all__ = ["MLP"]


class MLP(eqx.Module):
    """``n_inputs -> hidden... -> 1``: ``equinox.nn.Linear`` layers, ``activation``
    (a name in :data:`~analysis.stats.mlp.ACTIVATIONS`) after every hidden layer, a linear output.
    Called on one entry's standardised inputs ``(n_inputs,)``, returns a scalar.

    Build one with :func:`mlp`; equinox module, so a pytree whose float64 weights
    :func:`~analysis.stats.derive` and ``jax.grad`` differentiate.

    Parameters
    ----------
    layers : tuple of equinox.nn.Linear
        The layers, ``n_inputs -> hidden[0] -> ... -> 1`` (float64).
    activation : str
        The name of the hidden layers' activation, a key of :data:`~analysis.stats.mlp.ACTIVATIONS` (static).
    """

    layers: tuple[eqx.nn.Linear, ...]
    activation: str = eqx.field(static=True)

    def __call__(self, z: Any) -> Any:
        act = getattr(jax.nn, self.activation)  # analysis.stats.mlp.ACTIVATIONS' entry
        for layer in self.layers[:-1]:
            z = act(layer(z))
        return self.layers[-1](z)[0]

    @property
    def n_inputs(self) -> int:
        """Number of inputs, the first layer's ``in_features``."""
        return int(self.layers[0].in_features)

    @property
    def hidden(self) -> tuple[int, ...]:
        """Widths of the hidden layers."""
        return tuple(int(layer.out_features) for layer in self.layers[:-1])


MLP.__module__ = "analysis.stats.mlp"  # its public home (repr, pickle, docs)
