"""`run` (`pretrain launch`): `checkpoints/iter_<step:07d>/` (each a `checkpoint` artifact),
`metrics.jsonl`, `loss.png`."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base

KIND = "run"
CHECKPOINT_KIND = "checkpoint"
METRICS_FILE = "metrics.jsonl"


class MixtureRef(base.Record):
    build_sha256: str | None = None
    recipe_sha256: str | None = None


class RunFields(base.Fields):
    KIND: ClassVar[str] = KIND
    tokenizer: dict[str, Any] = Field(default_factory=dict)
    mixture: MixtureRef = Field(default_factory=MixtureRef)
    gate: dict[str, Any] | None = None
    mfu: dict[str, Any] = Field(default_factory=dict)
    world_size: int | None = None
    guard: dict[str, Any] = Field(default_factory=dict)
    smoke: dict[str, Any] | None = None
    """The checks a smoke run made (`pretrain launch --smoke`); absent otherwise."""


class CheckpointFields(base.Fields):
    """A checkpoint records only the common fields (config and counts hold its step)."""

    KIND: ClassVar[str] = CHECKPOINT_KIND


open = base.Artifact[RunFields].open
