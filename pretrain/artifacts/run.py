"""`run` (`pretrain launch`): a training run.

`RUN/checkpoints/iter_<step:07d>/` (each a `checkpoint` artifact: dist_checkpointing files and
`state.json`), `RUN/metrics.jsonl`, `RUN/loss.png`. The model behind a checkpoint is loaded by
`trainer.inference.load_model`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base

KIND = "run"
CHECKPOINT_KIND = "checkpoint"
CHECKPOINTS_DIR = "checkpoints"
METRICS_FILE = "metrics.jsonl"
_ITER = re.compile(r"iter_(\d{7})")


def checkpoint_name(step: int) -> str:
    return f"iter_{step:07d}"


class MixtureRef(base._Open):
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


class RunManifest(RunFields, base.Manifest):
    """A run artifact's manifest, as `open` reads it."""


write = base.Writer(RunFields)
"""Write a run artifact's manifest at the end of training (`pretrain launch`)."""


class CheckpointFields(base.Fields):
    """A checkpoint records only the common fields (config and counts hold its step)."""

    KIND: ClassVar[str] = CHECKPOINT_KIND


class CheckpointManifest(CheckpointFields, base.Manifest):
    """A checkpoint's manifest, as `open_checkpoint` reads it."""


write_checkpoint = base.Writer(CheckpointFields)
"""Write a checkpoint's manifest (trainer.checkpoint.save, rank 0)."""


class Checkpoint(base.Artifact[CheckpointManifest]):
    """A verified checkpoint: `RUN/checkpoints/iter_<step>/`."""

    @property
    def step(self) -> int:
        return int(self.manifest.counts["step"])


class Run(base.Artifact[RunManifest]):
    """A verified run artifact."""

    def checkpoint_dirs(self) -> list[tuple[int, Path]]:
        """(step, directory) of each finished checkpoint, oldest first."""
        found = []
        for path in (self.directory / CHECKPOINTS_DIR).glob("iter_*"):
            match = _ITER.fullmatch(path.name)
            if match and (path / "manifest.json").is_file():
                found.append((int(match.group(1)), path))
        return sorted(found)


def open_checkpoint(
    directory: str | os.PathLike, *, deep: bool = True, full: bool | None = None
) -> Checkpoint:
    root, manifest, raw = base.verified(directory, CheckpointManifest, deep=deep, full=full)
    return Checkpoint(root, manifest, raw)


def open(directory: str | os.PathLike, *, deep: bool = True, full: bool | None = None) -> Run:
    root, manifest, raw = base.verified(directory, RunManifest, deep=deep, full=full)
    return Run(root, manifest, raw)
