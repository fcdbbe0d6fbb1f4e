"""Imported first by :mod:`analysis.likelihood`: without the ``likelihood`` extra
(evermore, optimistix) the package stops with one :class:`analysis.extras.MissingExtra`
line naming it, before evermore's own ``ModuleNotFoundError``."""

from __future__ import annotations

from analysis.extras import require

__all__: list[str] = []

require("likelihood", "analysis.likelihood (the binned likelihood)")
