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

import math
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from analysis.errors import InputError
from analysis.limits import regular_file
from analysis.stats.mlp import Standardisation, from_arrays, to_arrays

if TYPE_CHECKING:
    from analysis.stats._mlpnet import MLP

__all__ = ["load_weights", "save_weights"]

_STANDARD = ("standardisation.mean", "standardisation.std")
_HEADER_MAX = 10000  # numpy's own default bound on an .npy header


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


def _check_members(path: Path, like: MLP) -> None:
    """Refuse, before any member is read, what would allocate beyond the network: a
    member not in the network (or the standardisation), a header whose shape differs
    from the expected one, an uncompressed size beyond it (a zip bomb)."""
    shapes = {k: tuple(np.shape(a)) for k, a in to_arrays(like).items()}
    shapes.update({k: (like.n_inputs,) for k in _STANDARD})
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            key = info.filename.removesuffix(".npy")
            if key not in shapes:
                raise InputError(f"{path}: unexpected key {key!r}; expected only "
                                 f"{', '.join(shapes)}")
            shape = shapes[key]
            bound = 8 * math.prod(shape) + _HEADER_MAX
            if info.file_size > bound:
                raise InputError(f"{path}: {key}: {info.file_size} bytes uncompressed, more "
                                 f"than the {bound} of shape {shape} in float64")
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                          else np.lib.format.read_array_header_2_0)
                found, _, dtype = header(f, max_header_size=_HEADER_MAX)
            if dtype.hasobject:  # pickled Python objects: never loaded
                raise InputError(f"{path}: not a readable npz weights file ({key} holds "
                                 "Python objects)")
            if dtype.kind not in "iuf":
                raise InputError(f"{path}: {key}: expected real numbers, found dtype {dtype}")
            if tuple(found) != shape:
                raise InputError(f"{path}: {key}: expected shape {shape} for the configured "
                                 f"network (inputs {like.n_inputs}, hidden "
                                 f"{list(like.hidden)}), found {tuple(found)}")


def load_weights(path: str | Path, like: MLP) -> tuple[MLP, Standardisation | None]:
    """``(net, standardisation or None)`` from the npz file ``path``, checked against ``like``.

    The file must be a regular file; member headers and uncompressed sizes are checked
    against ``like`` before anything is read (:func:`_check_members`); a standardisation
    ``std`` must be > 0, as the config's ``standardise.std``."""
    path = Path(path)
    regular_file(path, "weights file", error=InputError)
    try:
        _check_members(path, like)
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
        bad = np.flatnonzero(~(np.asarray(std) > 0))
        if bad.size:  # the config's standardise.std refuses these too
            raise InputError(f"{path}: {_STANDARD[1]}[{bad[0]}] = {std[bad[0]]:g}: expected "
                             "values > 0")
        standard = Standardisation(mean, std)
    return from_arrays(arrays, like, source=str(path)), standard
