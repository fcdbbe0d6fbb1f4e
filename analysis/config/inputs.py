"""Config schema of what is read and how: datasets, generated demo files, the executor.

Pydantic v2 models (:class:`DatasetConfig`, :class:`GenerateConfig`,
:class:`ExecutorConfig`) of :class:`analysis.config.loader.Config`; a problem is one
line through :func:`analysis.config.schema._fail`. Split out of
:mod:`analysis.config.loader`, which re-exports every name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from analysis.config.schema import _fail, _Model

__all__ = ["DatasetConfig", "ExecutorConfig", "GenerateConfig"]


class GenerateConfig(_Model):
    """Demo files made on first use by :mod:`analysis.data.generate` (deterministic, seeded)."""

    process: Literal["ttbar", "dy"]
    events: int = Field(ge=1)
    files: int = Field(default=1, ge=1)
    seed: int = 0
    dir: str


class DatasetConfig(_Model):
    """One dataset: its files, tree, per-event weight branch and normalisation.

    With ``generate``, ``files`` may be left out: they are the generated ones.
    """

    files: list[str] | None = None
    generate: GenerateConfig | None = None
    treename: str = "Events"
    weight: str | None = None
    role: Literal["signal", "background", "data"] | None = None
    xsec: float | None = Field(default=None, gt=0)
    scale: float | None = Field(default=None, ge=0)

    @field_validator("files", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("files")
    @classmethod
    def _nonempty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("empty file list")
        return v

    @model_validator(mode="after")
    def _check(self) -> DatasetConfig:
        if self.files is None and self.generate is None:
            raise _fail("files", "missing required key")
        if self.xsec is not None and self.scale is not None:
            raise _fail("scale", "give either 'xsec' or 'scale', not both")
        return self


class ExecutorConfig(_Model):
    """How chunks are processed (coffea executor).

    ``parsl_config`` (``type: parsl`` only): a Python file (relative to the config file)
    that defines ``config``, a ``parsl.config.Config``, used instead of the default
    local ``HighThroughputExecutor`` of ``workers`` workers."""

    type: Literal["iterative", "futures", "dask", "parsl"] = "iterative"
    workers: int = Field(default=1, ge=1)
    chunksize: int = Field(default=100_000, ge=1)
    address: str | None = None
    retries: int = Field(default=0, ge=0)
    parsl_config: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _check(self) -> ExecutorConfig:
        if self.address is not None and self.type != "dask":
            raise _fail("address", f"only allowed with type: dask, got type '{self.type}'")
        if self.parsl_config is not None and self.type != "parsl":
            raise _fail("parsl_config", f"only allowed with type: parsl, got type '{self.type}'")
        return self
