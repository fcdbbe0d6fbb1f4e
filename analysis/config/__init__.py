"""The one config loader: strict YAML (:mod:`.yamlsafe`), the pydantic schema
(:mod:`.schema`, :mod:`.loader`) and the objective terms' schemas (:mod:`.terms`)."""

from __future__ import annotations

from analysis.config.loader import Config, load_config

__all__ = ["Config", "load_config"]
