"""Exception hierarchy for user-facing diffcoffea errors."""

from __future__ import annotations

__all__ = [
    "ConfigError", "DiffcoffeaError", "DiffcoffeaWarning", "InputError", "LikelihoodError",
    "first_line",
]


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
