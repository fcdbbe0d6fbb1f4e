"""The optional parts of the install, and the one line that says which one is missing.

``pip install diffcoffea`` is the statistics, the soft selections, own processors and
the YAML engine on coffea's iterative and futures executors, with what coffea itself
needs. The rest comes with an extra (``pyproject.toml``, ``[project.optional-dependencies]``):

============== ====================================== ===========================================
extra          packages                               for
============== ====================================== ===========================================
``likelihood`` evermore, optimistix                   the binned profile likelihood
                                                      (:mod:`analysis.likelihood`, ``likelihood:``
                                                      sections, their objective terms and exports)
``dask``       dask, distributed                      ``executor: {type: dask}``, coffea's
                                                      ``DaskExecutor``
``parsl``      parsl                                  ``executor: {type: parsl}``
``all``        all of the above
============== ====================================== ===========================================

A feature whose extra is missing stops with one :class:`MissingExtra` line naming the
feature and the command that installs it (the command line prints it and exits 2).
Standard library only: it is asked before anything heavy is imported.
"""

from __future__ import annotations

import importlib.util

from analysis.errors import DiffcoffeaError

__all__ = ["EXTRAS", "MissingExtra", "missing", "require"]

#: extra -> the top-level modules it installs (what is looked for)
EXTRAS: dict[str, tuple[str, ...]] = {
    "likelihood": ("evermore", "optimistix"),
    "dask": ("dask", "distributed"),
    "parsl": ("parsl",),
}


class MissingExtra(DiffcoffeaError, ImportError):
    """A feature's optional packages are not installed: one line naming the feature,
    the missing module and ``pip install 'diffcoffea[EXTRA]'``."""


def missing(extra: str) -> str | None:
    """The first module of ``extra`` that cannot be imported here, or None.

    Parameters
    ----------
    extra : str
        A key of :data:`EXTRAS`.

    Returns
    -------
    str or None
        The module's name; None when every module of the extra is found (found, not
        imported: nothing heavy is loaded to answer).
    """
    for module in EXTRAS[extra]:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):  # a broken or blocked package counts as absent
            return module
    return None


def require(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtra` unless every module of ``extra`` is installed.

    Parameters
    ----------
    extra : str
        A key of :data:`EXTRAS`.
    feature : str
        What needs it, as the user wrote or calls it (a config key and its value, a
        module), the start of the one line.

    Raises
    ------
    MissingExtra
        ``"{feature} needs the '{extra}' extra ({module} is not installed): pip install
        'diffcoffea[{extra}]'"``.
    """
    module = missing(extra)
    if module is not None:
        raise MissingExtra(f"{feature} needs the {extra!r} extra ({module} is not installed): "
                           f"pip install 'diffcoffea[{extra}]'")
