"""Learned-score weights in npz files: data only (no pickle), checked against the config.

``save_weights(path, net, standard=st)`` writes :func:`analysis.stats.mlp.to_arrays`
(``layers.I.weight`` / ``layers.I.bias``, float64) and, if given, the input
standardisation (``standardisation.mean`` / ``standardisation.std``) with
``numpy.savez``. ``load_weights(path, like)`` reads them back with
``numpy.load(allow_pickle=False)`` (an object array in the file is refused) and
checks them against ``like``, the network the configuration describes
(:func:`analysis.stats.mlp.from_arrays`): a missing, extra or misshapen key, or a
non-finite weight, raises :class:`~analysis.errors.InputError` in one line naming the
file and the key (the command line's exit 2).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from analysis.errors import InputError
from analysis.stats.mlp import MLP, Standardisation, from_arrays, to_arrays

__all__ = ["load_weights", "save_weights"]

_STANDARD = ("standardisation.mean", "standardisation.std")


def save_weights(path: str | Path, net: MLP, *, standard: Standardisation | None = None) -> Path:
    """Write ``net``'s weights (and ``standard``) to the npz file ``path``; returns it."""
    path = Path(path)
    arrays = to_arrays(net)
    if standard is not None:
        arrays[_STANDARD[0]] = np.asarray(standard.mean, dtype=np.float64)
        arrays[_STANDARD[1]] = np.asarray(standard.std, dtype=np.float64)
    with path.open("wb") as fh:  # a file object: numpy would otherwise append ".npz"
        np.savez(fh, **arrays)
    return path


def load_weights(path: str | Path, like: MLP) -> tuple[MLP, Standardisation | None]:
    """``(net, standardisation or None)`` from the npz file ``path``, checked against ``like``."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise InputError(f"{path}: no such weights file") from None
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{path}: not a readable npz weights file ({first})") from None
    standard = None
    if any(k in arrays for k in _STANDARD):
        mean, std = (arrays.pop(k, None) for k in _STANDARD)
        for key, a in zip(_STANDARD, (mean, std), strict=True):
            if a is None or np.shape(a) != (like.n_inputs,):
                raise InputError(
                    f"{path}: {key}: expected shape ({like.n_inputs},), "
                    f"found {None if a is None else np.shape(a)}"
                )
            if not np.all(np.isfinite(a)):
                raise InputError(f"{path}: {key}: expected finite values")
        standard = Standardisation(mean, std)
    return from_arrays(arrays, like, source=str(path)), standard
