"""One artifact type for every kind, `Artifact[Fields]`, its one writer `write_artifact` and
`peek` (lineage walking): the contract is pretrain/CONTRACTS.md."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from pretrain.manifest import (
    COMMON_FIELDS,
    Manifest,
    check_seal,
    listed_path,
    load_manifest,
    manifest_sha256,
    require,
    typed_or_refused,
    write_manifest,
)
from pretrain.storage import ObjectPath


class Record(BaseModel):
    """A nested record read as written: fields it does not name are kept (and written back)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class TokenizerRef(Record):
    """The tokenizer an artifact was made with (`sha256`: its identity, tokenizer.identity_of)."""

    sha256: str
    name: str | None = None
    id: str | None = None
    vocab_size: int | None = None


class Fields(BaseModel):
    """What one kind records beyond the common fields (each kind subclasses it, typed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    KIND: ClassVar[str] = ""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        clash = sorted(COMMON_FIELDS & cls.model_fields.keys())
        if clash:
            raise TypeError(f"{cls.__name__} fields {clash} are common manifest fields")


F = TypeVar("F", bound=Fields)


def fields_of(model: type[F], raw: Mapping[str, Any], directory: object) -> F:
    """The kind's fields of manifest `raw`, typed by `model`; refused in one line otherwise."""
    own = {key: value for key, value in raw.items() if key not in COMMON_FIELDS}
    return typed_or_refused(model, own, directory, f"a {raw.get('kind')!r} manifest")  # type: ignore[no-any-return]


class Artifact(BaseModel, Generic[F]):
    """A verified artifact: its directory, common fields, the kind's fields, the manifest as
    written (`raw`)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    directory: Path
    manifest: Manifest
    fields: F
    raw: dict[str, Any]

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike,
        *,
        sha256: str | None = None,
        deep: bool = True,
        full: bool | None = None,
        kind: str | None = None,
    ) -> Self:
        """Verify the artifact (as a `kind`, by default the kind's) and read it typed."""
        model: Any = cls.model_fields["fields"].annotation  # the kind's Fields subclass
        root = Path(directory)
        raw = require(root, kind=kind or model.KIND, sha256=sha256, deep=deep, full=full)
        common = {key: value for key, value in raw.items() if key in COMMON_FIELDS}
        artifact = cls.model_construct(
            directory=root,
            manifest=Manifest.model_validate(common),  # load_manifest checked it: no error
            fields=fields_of(model, raw, root),
            raw=raw,
        )
        artifact.check()
        return cast(Self, artifact)

    def check(self) -> None:
        """What the kind verifies beyond its manifest (a subclass's); nothing by default."""

    @cached_property
    def manifest_sha256(self) -> str:
        """The artifact's identity: sha256 of its manifest bytes."""
        return manifest_sha256(self.directory)

    def path(self, rel: str) -> Path:
        """File `rel` of the artifact: confined to it and listed in its manifest."""
        return listed_path(self.directory, self.raw, rel)


def peek(directory: str | os.PathLike) -> Manifest:
    """The common fields of any artifact's manifest, its seal checked but not its files' bytes:
    for walking lineage (`inputs`) to the artifact a command then opens with its kind's `open`."""
    raw = load_manifest(directory)
    check_seal(directory, raw)
    return Manifest.model_validate({k: v for k, v in raw.items() if k in COMMON_FIELDS})


def write_artifact(
    directory: str | os.PathLike | ObjectPath,
    fields: Fields,
    *,
    config: Mapping[str, Any] | None = None,
    inputs: Sequence[str | os.PathLike] = (),
    counts: Mapping[str, Any] | None = None,
    known: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Write the manifest of a `type(fields).KIND` artifact: every file under `directory` hashed
    (but those whose writer's digest is `known`, `pretrain.manifest.write_manifest`), the kind's
    fields (those the builder set) beside the common ones, the manifest last, atomically."""
    kind = type(fields).KIND
    if not kind:
        raise TypeError(f"{type(fields).__name__} names no artifact kind")
    record = fields.model_dump(mode="json", exclude_unset=True)
    return write_manifest(
        directory,
        kind,
        config=config,
        inputs=list(inputs),
        counts=counts,
        extra=record,
        known=known,
    )
