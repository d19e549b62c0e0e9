"""`megatron-export` (`pretrain mixture export --megatron`): `<component>.bin/.idx` and per phase a
Megatron-LM `--data-args-path` file, `<number>-<phase>.data-args`."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from pretrain.artifacts import base

KIND = "megatron-export"


class ExportedComponent(base.Record):
    documents: int
    tokens: int


class MegatronExportFields(base.Fields):
    KIND: ClassVar[str] = KIND
    mixture_build_sha256: str | None = None
    token_dtype: str = "uint16"
    components: dict[str, ExportedComponent] = Field(default_factory=dict)
    blends: dict[str, dict[str, float]] = Field(default_factory=dict)
    """data-args file name -> component -> its weight (share of the phase's sample index)."""


open = base.Artifact[MegatronExportFields].open
