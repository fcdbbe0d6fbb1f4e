"""The one place that uses JAX's and numba's private parts (no public API says them).

One module per library (:mod:`analysis._compat.jax`, :mod:`analysis._compat.numba`, whose
runtime and entry points are :mod:`analysis._compat.numbaruntime`'s;
:mod:`analysis._compat.jaxstate` reads JAX's state without importing JAX), each private
use a small named function with a test in ``tests/_compat/`` that names the attribute
and the library's version when a release changes it. No other module of ``analysis`` or
``processors`` imports ``jax._src``, ``jax.interpreters``, ``jax.core`` or ``numba.core``
(``tests/_compat/test_private_imports.py``).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__all__ = ["CompatError", "lookup"]


class CompatError(RuntimeError):
    """A private JAX or numba name that the installed version of the library lacks."""


def lookup(private: dict[str, tuple[str, str, str]], name: str, *, library: str,
           written_for: str) -> Any:
    """The object that the table ``private`` names ``name``, looked up now.

    Parameters
    ----------
    private : dict
        ``name -> (module, attribute, what for)``; ``attribute`` may be dotted
        (``Class.member``).
    name : str
        A key of ``private``.
    library : str
        The library's import name (``"jax"``, ``"numba"``), for its version.
    written_for : str
        The version the table was checked against.

    Returns
    -------
    object
        The attribute.

    Raises
    ------
    CompatError
        Where the installed library lacks it: the message names the attribute, the
        library's version and the module of this package to update.
    """
    module, attribute, why = private[name]
    try:
        obj: Any = importlib.import_module(module)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        version = getattr(sys.modules.get(library), "__version__", "?")
        raise CompatError(
            f"analysis._compat.{library}: {library} {version} has no {module}.{attribute} "
            f"(used for: {why}; written for {library} {written_for}): update "
            f"analysis/_compat/{library}.py") from err
    return obj
