"""A branch missing from a dataset's file, as one line naming the dataset, the config
keys that read it and the closest names the file has."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["config_keys", "missing_branch_line", "read_by"]


def config_keys(config: Any, name: str, dataset: str | None = None) -> list[str]:
    """The dotted keys of ``config`` whose text names ``name`` as a whole word (an
    expression ``Jet.btagDeepB > 0``, a weight ``PSWeight[0]``), written as the config
    loader's messages write them (``systematics.0.up``, ``selection.objects.cuts.1.var``).
    Keys under ``datasets.`` other than ``datasets.<dataset>`` are left out.

    Parameters
    ----------
    config : Config
        The loaded config: its file's own keys where it came from a file.
    name : str
        The branch or field name.
    dataset : str or None, optional
        The dataset whose file lacks it.

    Returns
    -------
    list of str
        The keys, in the config's order.
    """
    data = _as_written(config)
    word = re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])")
    out: list[str] = []

    def walk(x: Any, path: str) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, f"{path}.{i}")
        elif isinstance(x, str) and word.search(x):
            out.append(path)

    walk(data, "")
    if dataset is not None:
        out = [k for k in out if not k.startswith("datasets.") or k.startswith(f"datasets.{dataset}.")]
    return out


def _as_written(config: Any) -> Any:
    """The config file's own data (the keys as the user wrote them), else the model's."""
    try:
        from analysis.config.yamlsafe import parse_yaml

        return parse_yaml(Path(config.source).read_text(), config.source)
    except Exception:  # a config made in Python (no file): the model's own keys
        return config.model_dump(mode="json", exclude_none=True)


def missing_branch_line(err: Any, path: str, dataset: str, config: Any) -> str:
    """One line for a :class:`~analysis.data.columns.MissingBranchError` of ``path``, a
    file of ``dataset``: the file, what is missing, the closest names the file has, the
    config keys that read it and ``datasets.<dataset>``.

    Parameters
    ----------
    err : MissingBranchError
        The error (``name``, ``what``, ``close``).
    path : str
        The file.
    dataset : str
        The dataset.
    config : Config
        The loaded config.

    Returns
    -------
    str
    """
    from analysis.data.columns import suggestion

    return f"{path}: no {err.what} {err.name!r}{suggestion(err.close)}" + read_by(
        config, err.name, dataset)


def read_by(config: Any, name: str, dataset: str) -> str:
    """The end of a line about ``name`` (a branch, field or collection) in a file of
    ``dataset``: ``"; read by KEY, ... for datasets.DATASET"`` (the config keys that name
    it, :func:`config_keys`), or ``"; in datasets.DATASET"`` where no key names it.

    Parameters
    ----------
    config : Config
        The loaded config.
    name : str
        The branch, field or collection.
    dataset : str
        The dataset whose file lacks it.

    Returns
    -------
    str
    """
    keys = config_keys(config, name, dataset) if name else []
    own = f"datasets.{dataset}"
    read = f"; read by {', '.join(keys)}" if keys else ""
    if not any(k.startswith(own + ".") for k in keys):
        read += f" for {own}" if keys else f"; in {own}"
    return read
