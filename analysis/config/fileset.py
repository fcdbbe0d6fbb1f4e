"""coffea filesets as the config's ``datasets:``.

``datasets:`` may be, besides the config's own layout (:class:`~analysis.config.inputs.DatasetConfig`):

* a path (a string, relative to the config file) to a JSON file holding a coffea
  fileset ``{DATASET: {"files": {PATH: TREE}, "metadata": {...}}}``, or the output of
  ``coffea.dataset_tools.preprocess`` (``files`` map to ``{"object_path": TREE, "steps":
  ..., "num_entries": ..., "uuid": ...}``; a dataset may carry ``form``);
* the same mapping inline in the YAML.

:func:`expand_datasets` turns either into the config's layout: ``files`` the list of
paths (a relative one is relative to the JSON file, or, inline, to the config file;
``root://`` and other URLs are kept as written and reach uproot unchanged),
``treename`` the files' tree, and from ``metadata`` the keys the config knows
(``xsec``, ``role``, ``weight``, ``scale``, ``treename``); other metadata keys (coffea
filesets carry free-form ones, e.g. ``year``) are left in the fileset, unused. The
``steps`` of a ``preprocess`` output are not used: diffcoffea chunks every file by
``executor.chunksize`` itself, so results do not depend on how the file was
preprocessed. A dataset whose files name different trees is refused (one tree per
dataset). A problem is one :class:`~analysis.errors.ConfigError` line naming the file
and the key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from analysis.errors import ConfigError

__all__ = ["METADATA_KEYS", "expand_datasets", "is_fileset_entry"]

METADATA_KEYS = ("xsec", "role", "weight", "scale", "treename")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")  # root://, https://, skhep:, ...
# coffea's DatasetSpec (coffea.dataset_tools.filespec) and the legacy preprocess output
_DATASET_KEYS = ("files", "metadata", "form", "compressed_form", "format", "did")
MAX_FILESET_BYTES = 64 * 1024 * 1024


def is_fileset_entry(entry: Any) -> bool:
    """Whether one dataset entry is in coffea's layout: ``files`` a mapping (path to
    tree, or to a ``preprocess`` record), or a ``metadata`` mapping."""
    return isinstance(entry, Mapping) and (
        isinstance(entry.get("files"), Mapping) or "metadata" in entry
    )


def _tree(where: str, path: str, value: Any) -> str:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, Mapping):
        tree = value.get("object_path")
        if isinstance(tree, str) and tree:
            return tree
        return _bad(f"{where}.files.{path}.object_path",
                    f"expected the tree name (a string), found {tree!r}")
    return _bad(f"{where}.files.{path}",
                f"expected a tree name or a preprocess record, found {value!r}")


def _bad(where: str, msg: str) -> Any:
    raise ConfigError(f"{where}: {msg}")


def _dataset(name: str, entry: Any, where: str, base: Path | None) -> dict[str, Any]:
    """One coffea dataset entry as the config's layout."""
    here = f"{where}.{name}"
    if not isinstance(entry, Mapping):
        return _bad(here, "expected a mapping with 'files' (and optionally 'metadata')")
    for key in entry:
        if key not in _DATASET_KEYS:
            _bad(f"{here}.{key}", f"unknown key; a fileset dataset has {', '.join(_DATASET_KEYS)}")
    if entry.get("format") not in (None, "root"):
        _bad(f"{here}.format", f"{entry['format']!r}; diffcoffea reads ROOT files ('root')")
    files = entry.get("files")
    if isinstance(files, (list, tuple)) or isinstance(files, str):  # the config's own list
        files = {f: "Events" for f in ([files] if isinstance(files, str) else files)}
    if not isinstance(files, Mapping) or not files:
        return _bad(f"{here}.files", f"expected a non-empty mapping {{path: tree}}, found {files!r}")
    trees = {}
    for path, value in files.items():
        if not isinstance(path, str) or not path:
            _bad(f"{here}.files", f"expected file paths as keys, found {path!r}")
        trees[path] = _tree(here, path, value)
    meta = entry.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return _bad(f"{here}.metadata", f"expected a mapping, found {meta!r}")
    out: dict[str, Any] = {k: meta[k] for k in METADATA_KEYS if k in meta}
    names = sorted(set(trees.values()))
    if len(names) > 1:
        _bad(f"{here}.files", f"the files name different trees {names}; diffcoffea reads one "
             "tree per dataset (split it into datasets)")
    if "treename" in out and out["treename"] != names[0]:
        _bad(f"{here}.metadata.treename",
             f"{out['treename']!r}, but the files name the tree {names[0]!r}")
    out["treename"] = names[0]

    def located(p: str) -> str:
        if base is None or _URL.match(p) or os.path.isabs(p):
            return p
        return str(base / p)

    out["files"] = [located(p) for p in trees]
    _check(out, here)
    return out


def _check(dataset: dict[str, Any], where: str) -> None:
    """The metadata values, checked here so that the line names the fileset's file."""
    from pydantic import ValidationError

    from analysis.config.inputs import DatasetConfig

    try:
        DatasetConfig.model_validate(dataset)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = ".".join(str(p) for p in err["loc"])
        msg = err.get("ctx", {}).get("msg") or err["msg"]
        _bad(f"{where}.metadata.{key}", f"{msg} (found {err.get('input')!r})")


def _read(path: Path, where: str) -> Any:
    """The fileset JSON at ``path``: a regular file of at most :data:`MAX_FILESET_BYTES`
    (a FIFO, ``/dev/zero`` or a directory refused at once), each key once per object."""
    from analysis.jsonsafe import read_json

    if not os.path.lexists(path):
        return _bad(where, f"no such file {str(path)!r}")
    return read_json(path, "JSON fileset", max_bytes=MAX_FILESET_BYTES)


def expand_datasets(
    datasets: Any, *, source: str = "<config>", base_dir: Path | None = None
) -> Any:
    """The config's ``datasets:`` with a fileset (path or inline) expanded (module
    docstring); anything else is returned unchanged for the schema to check.

    Parameters
    ----------
    datasets : the ``datasets`` value of the parsed YAML.
    source : the config's name, for messages.
    base_dir : the config file's directory (relative paths); default the working directory.

    Returns
    -------
    ``{DATASET: {"files": [...], "treename": ..., metadata keys}}`` or ``datasets``.
    """
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    if isinstance(datasets, str):
        path = Path(datasets) if os.path.isabs(datasets) else base / datasets
        data = _read(path, f"{source}: datasets")
        if not isinstance(data, Mapping) or not data:
            return _bad(str(path), "expected a fileset, a mapping {dataset: {'files': "
                        f"{{path: tree}}, 'metadata': {{...}}}}, found {type(data).__name__}")
        return {str(k): _dataset(str(k), v, str(path), path.parent) for k, v in data.items()}
    if isinstance(datasets, Mapping) and any(is_fileset_entry(v) for v in datasets.values()):
        return {k: _dataset(str(k), v, f"{source}: datasets", None) if is_fileset_entry(v)
                else v for k, v in datasets.items()}
    return datasets
