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
from analysis.extras import EXTRAS, missing
from analysis.limits import (
    MAX_GENERATED_EVENTS,
    MAX_GENERATED_FILES,
    MAX_RETRIES,
    MAX_SEED,
    MAX_WORKERS,
)

__all__ = ["DatasetConfig", "EngineConfig", "ExecutorConfig", "GenerateConfig"]


class GenerateConfig(_Model):
    """Demo files made on first use by :mod:`analysis.data.generate` (deterministic, seeded)."""

    process: Literal["ttbar", "dy"]
    events: int = Field(ge=1, le=MAX_GENERATED_EVENTS)
    files: int = Field(default=1, ge=1, le=MAX_GENERATED_FILES)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
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


class EngineConfig(_Model):
    """Which backend computes the passes, on which device
    (:class:`analysis.pipeline.backend.Backend`): ``backend: auto`` (numba where it
    serves the plan, JAX for the rest), ``numba`` or ``jax``; ``device: cpu`` or ``gpu``
    (the JAX kernel's device; the numba kernels run on the CPU only);
    ``tangent_block: N`` the JAX kernel's Jacobian N tangents at a time (memory ~N x the
    chunk; default: one block up to 8 parameters, past that as many as fit a budget,
    :func:`analysis.stats.taylor.tangent_block`; results do not depend on it)."""

    backend: Literal["auto", "numba", "jax"] = "auto"
    device: Literal["cpu", "gpu"] = "cpu"
    tangent_block: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        if self.backend == "numba" and self.device == "gpu":
            raise _fail("device", "backend 'numba' runs on the CPU only; use backend 'jax' "
                        "(or 'auto') with device 'gpu'")
        return self


class ExecutorConfig(_Model):
    """How chunks are processed (coffea executor).

    ``parsl_config`` (``type: parsl`` only): a Python file (relative to the config file)
    that defines ``config``, a ``parsl.config.Config``, used instead of the default
    local ``HighThroughputExecutor`` of ``workers`` workers."""

    type: Literal["iterative", "futures", "dask", "parsl"] = "iterative"
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    chunksize: int = Field(default=100_000, ge=1)
    address: str | None = None
    retries: int = Field(default=0, ge=0, le=MAX_RETRIES)
    parsl_config: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _check(self) -> ExecutorConfig:
        if self.address is not None and self.type != "dask":
            raise _fail("address", f"only allowed with type: dask, got type '{self.type}'")
        if self.address is not None:
            try:
                check_address(self.address)
            except ValueError as err:
                raise _fail("address", str(err)) from None
        if self.parsl_config is not None and self.type != "parsl":
            raise _fail("parsl_config", f"only allowed with type: parsl, got type '{self.type}'")
        if self.type in EXTRAS:  # dask, parsl: an extra of the install
            module = missing(self.type)
            if module is not None:
                raise _fail("type", f"'{self.type}' needs the {self.type!r} extra ({module} is "
                                    f"not installed): pip install 'diffcoffea[{self.type}]'")
        return self


#: Schemes of a dask scheduler address (distributed's comm backends reachable from
#: another process; ``inproc://`` lives inside one process only).
DASK_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss")


def check_address(address: str) -> str:
    """``address`` if it is ``SCHEME://HOST:PORT`` with a dask scheme, a host and a port
    in 1..65535; else ``ValueError`` (one line)."""
    from urllib.parse import urlsplit

    expected = "expected SCHEME://HOST:PORT, e.g. tcp://127.0.0.1:8786"
    if not isinstance(address, str) or "://" not in address:
        raise ValueError(f"{address!r} is not a scheduler address; {expected}")
    try:
        url = urlsplit(address)
        port = url.port
    except ValueError as err:  # a port that is not a number or beyond 65535
        raise ValueError(f"{address!r}: {err}; {expected}") from None
    if url.scheme not in DASK_SCHEMES:
        raise ValueError(f"{address!r}: scheme {url.scheme!r}; expected one of "
                         f"{', '.join(DASK_SCHEMES)} ({expected})")
    if not url.hostname:
        raise ValueError(f"{address!r}: no host; {expected}")
    if port is None or not 1 <= port <= 65535:
        raise ValueError(f"{address!r}: expected a port in 1..65535; {expected}")
    if url.path not in ("", "/") or url.query or url.fragment:
        raise ValueError(f"{address!r}: unexpected path or query; {expected}")
    return address
