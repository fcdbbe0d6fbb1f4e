"""Exception hierarchy for user-facing diffcoffea errors."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = [
    "ConfigError", "DiffcoffeaError", "DiffcoffeaWarning", "InputError", "LikelihoodError",
    "causes", "first_line",
]


def causes(err: BaseException) -> Iterator[BaseException]:
    """``err``, then the exception it was raised from or while handling
    (``__cause__``, else ``__context__``), and so on, each once (a cycle ends it):
    executors and libraries wrap the error that says what went wrong."""
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def first_line(err: BaseException) -> str:
    """The first line of a library's message (its type's name if empty): what a
    one-line error quotes of a third-party exception."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class DiffcoffeaError(Exception):
    """User-facing error: str(e) is ONE line naming the file/key/value and what was expected.

    The CLI prints it and exits with status 2.
    """


class ConfigError(DiffcoffeaError):
    """The YAML configuration is unreadable or does not match the schema."""


class InputError(DiffcoffeaError):
    """Bad input data: unreadable data files, missing trees or branches, etc."""


class LikelihoodError(DiffcoffeaError):
    """A model or its templates are unusable: one line naming the channel, sample or bin
    (raised by :mod:`analysis.likelihood`, which re-exports it; defined here so that
    catching it does not load the likelihood's solvers).

    Parameters
    ----------
    message : str
        One line naming the channel, sample or bin and what was expected.
    """


class DiffcoffeaWarning(UserWarning):
    """Something was done for the user that they should know (one line): the command line
    prints it as ``diffcoffea: warning: ...``."""
