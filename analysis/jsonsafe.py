"""Reading JSON the package did not necessarily write: strict and bounded.

Every JSON file the package reads (a fileset, a results.json, a generated dataset's
manifest, a checkpoint's state, a lock file) goes through :func:`parse_json`: a key
given twice in one object is an error naming the key (``json.loads`` keeps the last
silently, as YAML's strict loader refuses it: :mod:`analysis.config.yamlsafe`), and a
document nested too deeply for the parser is one line, never a ``RecursionError``.
:func:`read_json` first makes sure the path is a regular file of bounded size
(:func:`analysis.limits.regular_file`: a FIFO, a device such as ``/dev/zero``, a
directory is refused at once, before anything is read).

Only the standard library.
"""

from __future__ import annotations

import json
import os
from typing import Any

from analysis.errors import ConfigError
from analysis.limits import regular_file

__all__ = ["DuplicateKeyError", "parse_json", "read_json", "read_optional_json"]


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            shown = key if len(key) <= 60 else key[:57] + "..."
            raise DuplicateKeyError(f"duplicate key {shown!r}")
        out[key] = value
    return out


def parse_json(raw: bytes | str, source: str, *, error: type[Exception] = ConfigError,
               what: str = "JSON document") -> Any:
    """The JSON document ``raw`` (bytes are UTF-8), or ``error`` in one line
    ``"{source}: not a {what} (...)"``: bad syntax or encoding, a key given twice in
    one object, nesting too deep for the parser."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        return json.loads(text, object_pairs_hook=_unique)
    except DuplicateKeyError as err:
        raise error(f"{source}: not a {what} ({err}; each key once)") from None
    except RecursionError:
        raise error(f"{source}: not a {what} (JSON nested too deeply)") from None
    except (UnicodeDecodeError, ValueError) as err:
        reason = str(err).replace("\n", " ")
        raise error(f"{source}: not a {what} ({reason})") from None


def read_json(path: str | os.PathLike, what: str, *, error: type[Exception] = ConfigError,
              max_bytes: int | None = None) -> Any:
    """The JSON document in the regular file ``path`` (at most ``max_bytes``; default the
    bound of :func:`~analysis.limits.regular_file`), or ``error`` in one line naming the
    path and ``what`` it was to be."""
    size = regular_file(path, what, error=error, max_bytes=max_bytes)
    bound = max(size, max_bytes or 0)  # read bounded even if the file was swapped since
    try:
        with open(path, "rb") as f:
            raw = f.read(bound + 1)
    except OSError as err:
        raise error(f"{path}: cannot read the {what}: {err.strerror or err}") from None
    if len(raw) > bound:  # grew since it was checked
        raise error(f"{path}: {what} is larger than {bound} bytes")
    return parse_json(raw, os.fspath(path), error=error, what=what)


def read_optional_json(path: str | os.PathLike, what: str, *,
                       error: type[Exception] = ConfigError, max_bytes: int) -> Any:
    """The JSON document at ``path``, or None where it is missing or not valid JSON (a
    record to be written again); a FIFO, a device, a directory or a file beyond
    ``max_bytes`` is ``error`` in one line, never read."""
    if not os.path.lexists(path):
        return None
    regular_file(path, what, error=error, max_bytes=max_bytes)
    try:
        return read_json(path, what, error=error, max_bytes=max_bytes)
    except error:
        return None
