"""coffea processors: thin glue between coffea's executors and :mod:`analysis`."""

from processors.diff_processor import DiffProcessor

__all__ = ["DiffProcessor"]
