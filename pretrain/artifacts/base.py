"""What every artifact kind shares: the manifest's common fields, typed reading, writing.

Each kind module (`pretrain.artifacts.shards`, `.encoded`, ...) declares a `Manifest` subclass
with the fields that kind writes, an `open(dir)` returning a typed reader, and a `write(...)`.
Verification is `pretrain.manifest.require` (bytes, kind, identity); nothing here re-checks.

Reading is tolerant: fields an older or newer version wrote that the model does not name are
ignored, and fields added later have defaults. Writing is strict (`extra="forbid"`): a
kind-specific field the model does not know is refused before anything is written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pretrain.errors import ArtifactError
from pretrain.manifest import listed_path, manifest_sha256, require, write_manifest

_COMMON = frozenset(
    {
        "manifest_version",
        "kind",
        "created_unix",
        "command",
        "config",
        "config_sha256",
        "git",
        "inputs",
        "files",
        "counts",
    }
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileEntry(_Model):
    bytes: int
    sha256: str


class InputRef(_Model):
    """One lineage entry: an artifact this one was made from."""

    path: str
    kind: str
    manifest_sha256: str


class TokenizerRef(_Model):
    """The tokenizer an artifact was made with (its lock.json sha256 is the identity)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    sha256: str
    name: str | None = None
    id: str | None = None
    vocab_size: int | None = None


class Manifest(_Model):
    """The fields `pretrain.manifest.write_manifest` writes for every kind."""

    KIND: ClassVar[str] = ""
    manifest_version: int = 1
    kind: str
    created_unix: float | None = None
    command: list[str] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)
    config_sha256: str | None = None
    git: dict[str, Any] = Field(default_factory=dict)
    inputs: list[InputRef] = Field(default_factory=list)
    files: dict[str, FileEntry] = Field(default_factory=dict)
    counts: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def parse(cls, raw: dict[str, Any], directory: str | os.PathLike) -> Any:
        """The typed manifest; unknown fields (other versions) are ignored, bad types refused."""
        known = {key: value for key, value in raw.items() if key in cls.model_fields}
        try:
            return cls.model_validate(known)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ArtifactError(
                f"{directory}: manifest field {where!r} is not what a {cls.KIND!r} artifact "
                f"holds ({first['msg']}); rebuild the artifact"
            ) from None

    def input_of(self, kind: str) -> InputRef | None:
        """The first lineage entry of `kind`, if any."""
        return next((entry for entry in self.inputs if entry.kind == kind), None)


M = TypeVar("M", bound=Manifest)


class Artifact(Generic[M]):
    """A verified artifact: its directory, typed manifest and the manifest as written."""

    def __init__(self, directory: Path, manifest: M, raw: dict[str, Any]) -> None:
        self.directory = directory
        self.manifest = manifest
        self.raw = raw

    @cached_property
    def manifest_sha256(self) -> str:
        """The artifact's identity: sha256 of its manifest bytes."""
        return manifest_sha256(self.directory)

    def path(self, rel: str) -> Path:
        """File `rel` of the artifact: confined to it and listed in its manifest."""
        return listed_path(self.directory, self.raw, rel)

    def has(self, rel: str) -> bool:
        return rel in self.raw["files"]


def verified(
    directory: str | os.PathLike,
    model: type[M],
    *,
    sha256: str | None = None,
    deep: bool = True,
    full: bool | None = None,
) -> tuple[Path, M, dict[str, Any]]:
    """`require` the artifact as a `model.KIND` and parse its manifest with `model`."""
    root = Path(directory)
    raw = require(root, kind=model.KIND, sha256=sha256, deep=deep, full=full)
    return root, model.parse(raw, root), raw


def write(
    directory: str | os.PathLike,
    model: type[Manifest],
    fields: dict[str, Any] | None = None,
    *,
    config: Mapping[str, Any] | None | None = None,
    inputs: Sequence[str | os.PathLike] = (),
    counts: Mapping[str, Any] | None | None = None,
) -> dict[str, Any]:
    """Check the kind's `fields` against `model` (unknown or mistyped: refused), then write the
    manifest last, atomically, recording the command `pretrain.cli.main` captured."""
    fields = dict(fields or {})
    clash = sorted(_COMMON & fields.keys())
    if clash:
        raise ValueError(f"{model.KIND} fields {clash} are common manifest fields; pass them apart")
    model.model_validate({"kind": model.KIND, **fields})
    return write_manifest(
        directory, model.KIND, config=config, inputs=inputs, counts=counts, extra=fields
    )
