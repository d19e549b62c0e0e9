"""`megatron-export` (`pretrain mixture export --megatron`): a mixture as Megatron-LM data.

`DIR/<component>.bin/.idx` (the component's selected documents, copied in order) and per phase
`DIR/<number>-<phase>.data-args` (`weight prefix ...`, Megatron-LM's `--data-args-path` file).
"""

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
