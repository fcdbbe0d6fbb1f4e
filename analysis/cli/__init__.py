"""The command line (``diffcoffea``): parser, commands, output directory, report, plots."""

from __future__ import annotations

from analysis.cli.parser import main

__all__ = ["main"]
