"""What every artifact kind shares: the manifest's common fields, typed reading, typed writing.

Each kind module (`pretrain.artifacts.shards`, `.encoded`, ...) declares
- a `Fields` subclass: the fields that kind records beyond the common ones, typed;
- its `Manifest` (those fields plus the common ones), which `open(dir)` returns inside a reader;
- `write = Writer(ItsFields)`: the one writer of that kind.

`Writer(...)(directory, fields, config=..., inputs=..., counts=...)` is the same call for every
kind: the kind's own data travels as one typed `Fields` object (a field the kind lacks, or of the
wrong type, is refused before anything is written), and the command recorded is the one
`pretrain.program.run` captured (pretrain.command): no writer takes a command.
Verification is `pretrain.manifest.require` (bytes, kind, identity, the manifest's seal); nothing
here re-checks.

Reading is tolerant of versions: fields an older or newer version wrote that the model does not
name are ignored, fields added later have defaults. A manifest edited after it was written is not a
version: its seal no longer matches and `require` refuses it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pretrain.errors import ArtifactError
from pretrain.manifest import (
    check_seal,
    listed_path,
    load_manifest,
    manifest_sha256,
    require,
    write_manifest,
)
from pretrain.storage import ObjectPath

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
        "seal",
    }
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Open(BaseModel):
    """A nested record read as written: fields it does not name are kept (and written back)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class FileEntry(_Model):
    bytes: int
    sha256: str


class InputRef(_Model):
    """One lineage entry: an artifact this one was made from."""

    path: str
    kind: str
    manifest_sha256: str


class TokenizerRef(_Open):
    """The tokenizer an artifact was made with (`sha256`: its identity, tokenizer.identity_of)."""

    sha256: str
    name: str | None = None
    id: str | None = None
    vocab_size: int | None = None


class Fields(_Model):
    """What one kind records beyond the common fields (each kind subclasses it, typed)."""

    KIND: ClassVar[str] = ""

    def record(self) -> dict[str, Any]:
        """The fields as the manifest holds them (only those the builder set)."""
        return self.model_dump(mode="json", exclude_unset=True)


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
    seal: str | None = None
    """sha256 of the manifest's other fields (manifest version 2; pretrain.manifest.seal_of)."""

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


def peek(directory: str | os.PathLike) -> Manifest:
    """The common fields of any artifact's manifest, its seal checked but not its files' bytes:
    for walking lineage (`inputs`) to the artifact a command then opens with its kind's `open`."""
    raw = load_manifest(directory)
    check_seal(directory, raw)
    return Manifest.parse(raw, directory)  # type: ignore[no-any-return]


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


F = TypeVar("F", bound=Fields)


class Writer(Generic[F]):
    """The writer of one kind: `write(directory, fields, config=..., inputs=..., counts=...)`
    hashes every file under `directory` (but those whose writer's digest is `known`,
    `pretrain.manifest.write_manifest`) and writes the manifest last, atomically, with the
    kind's `fields` and the command `pretrain.program.run` captured."""

    def __init__(self, fields: type[F]) -> None:
        self.fields = fields

    def __call__(
        self,
        directory: str | os.PathLike | ObjectPath,
        fields: F,
        *,
        config: Mapping[str, Any] | None = None,
        inputs: Sequence[str | os.PathLike] = (),
        counts: Mapping[str, Any] | None = None,
        known: dict[str, dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        if not isinstance(fields, self.fields) or not type(fields).KIND:
            raise TypeError(f"{self.fields.__name__} expected, got {type(fields).__name__}")
        record = fields.record()
        clash = sorted(_COMMON & record.keys())
        if clash:
            raise ValueError(f"{fields.KIND} fields {clash} are common manifest fields")
        return write_manifest(
            directory,
            type(fields).KIND,
            config=config,
            inputs=list(inputs),
            counts=counts,
            extra=record,
            known=known,
        )
