"""`manifest.json`, written last, atomically, sealed: what made an artifact, what it was made from and
every file's bytes and sha256; `require` verifies one for a consumer. The one format and the seal (a
plain sha256: it catches an edit, not a forger who recomputes it): pretrain/CONTRACTS.md."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pretrain import shards_layout, storage
from pretrain.errors import ArtifactError
from pretrain.hashcache import sha256_file
from pretrain.locking import is_lock_file
from pretrain.progress import LOGS_DIR
from pretrain.provenance import current_command, git_state

MANIFEST = "manifest.json"
MANIFEST_VERSION = 2
SEAL = "seal"


class _Strict(BaseModel):
    """JSON types as written: a string is no number, true is no integer, no field unnamed."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class FileEntry(_Strict):
    bytes: int
    sha256: str


class InputRef(_Strict):
    """One lineage entry: an artifact this one was made from."""

    path: str
    kind: str
    manifest_sha256: str


class Manifest(_Strict):
    """The fields every manifest holds (`write_manifest`); a kind's own fields sit beside them
    at the top level, typed by its `pretrain.artifacts` model."""

    manifest_version: Literal[2]
    kind: str
    created_unix: float
    command: list[str]
    config: dict[str, Any]
    config_sha256: str
    git: dict[str, Any]
    inputs: list[InputRef] = Field(default_factory=list)
    files: dict[str, FileEntry]
    counts: dict[str, Any]
    seal: str
    """sha256 of the manifest's other fields (`seal_of`)."""

    def input_of(self, kind: str) -> InputRef | None:
        """The first lineage entry of `kind`, if any."""
        return next((entry for entry in self.inputs if entry.kind == kind), None)


COMMON_FIELDS = frozenset(Manifest.model_fields)


def typed_or_refused(model: type[Any], data: dict[str, Any], where: object, what: str) -> Any:
    """`data` validated by `model`, or a one-line ArtifactError naming the first bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise ArtifactError(
            f"{where}: field {field!r} is not what {what} holds ({first['msg']}): the manifest "
            "was edited or damaged (or another version wrote it); rebuild the artifact"
        ) from None


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON bytes (sorted keys, no spaces): the input of every config/recipe hash."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def seal_of(manifest: Mapping[str, Any]) -> str:
    """The seal of a manifest: sha256 of the canonical JSON of every field but the seal, as the
    manifest holds them (JSON round-tripped, so tuples and int keys read back the same)."""
    body = json.loads(json.dumps({k: v for k, v in manifest.items() if k != SEAL}))
    return sha256_bytes(canonical_json(body))


def check_seal(
    directory: str | os.PathLike | storage.ObjectPath, manifest: Mapping[str, Any]
) -> None:
    """Refuse a manifest whose seal does not match its other fields (`load_manifest` has checked
    that it is the one format)."""
    if manifest.get(SEAL) != seal_of(manifest):
        raise ArtifactError(
            f"{directory}/{MANIFEST} does not match its seal: the manifest was edited "
            "after it was written; rebuild the artifact with the command it records"
        )


STAGING_DIR = ".pretrain-staging"
"""Inside an artifact, where a nested one (a mixture's report/) is built before it is published
(pretrain.publish): what a killed write left there is the re-run's to remove, never listed."""

UNLISTED_DIRS = (shards_layout.GLOBAL_MAP_DIR, STAGING_DIR)
"""Resume caches a command verifies itself and may delete (the data job's global map side), and
the staging folder: never listed, never reported as unlisted, so removing them leaves the
artifact verifying."""


def _is_scratch(path: Any, root: Any) -> bool:  # Path or storage.ObjectPath, both
    """Files no manifest holds: the manifest itself, writer lock files, in-flight temp files
    of `storage.write_atomic`, the commands' own logs (`.logs/`, pretrain.progress: no command
    reads them and they differ on every run) and UNLISTED_DIRS. Dot-files are held like any other (torch DCP's
    `.metadata`)."""
    rel = path.relative_to(root).as_posix()
    name = path.name
    return (
        rel == MANIFEST
        or rel.startswith(f"{LOGS_DIR}/")
        or any(rel.startswith(f"{folder}/") for folder in UNLISTED_DIRS)
        or STAGING_DIR in rel.split("/")[:-1]  # a nested artifact's, unfinished
        or is_lock_file(path)
        or (name.startswith(".") and name.endswith(".tmp"))
    )


def _listing(root: storage.OutPath) -> list[tuple[str, int]]:
    """(relative name, bytes) of every file a manifest lists, sorted; an object store's sizes
    come from its listing (no request per object)."""
    found: list[tuple[Any, int]]  # Paths, or ObjectPaths of an object store
    if isinstance(root, storage.ObjectPath):
        found = list(root.files_and_sizes())
    else:
        found = [(path, path.stat().st_size) for path in root.rglob("*") if path.is_file()]
    return [
        (path.relative_to(root).as_posix(), size)
        for path, size in sorted(found, key=lambda item: item[0])
        if not _is_scratch(path, root)
    ]


def file_records(
    directory: str | os.PathLike | storage.ObjectPath,
    known: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """{rel: {bytes, sha256}} of every file a manifest written now would list (a builder whose
    fields hold a digest of its files, a tokenizer's identity, takes them here and passes them to
    its writer as `known`, so each file is read once). A file in `known` (taken from it) whose
    size is the one its writer recorded keeps the writer's sha256: the writer hashed the bytes it
    wrote, so the driver does not read them again. Every other file is hashed here."""
    root, known = storage.output_path(directory), {} if known is None else known
    files: dict[str, dict[str, Any]] = {}
    for rel, size in _listing(root):
        record = known.pop(rel, None)
        if record is not None and record.get("bytes") == size and record.get("sha256"):
            files[rel] = {"bytes": size, "sha256": record["sha256"]}
            continue
        size, digest = storage.size_and_sha256(root / rel, full=True)
        files[rel] = {"bytes": size, "sha256": digest}
    return files


def _nested_artifact(path: storage.OutPath, root: storage.OutPath) -> bool:
    """True when `path` lies in a sub-directory that is an artifact of its own (has a manifest),
    e.g. TOKENIZER/eval or RUN/evals, written after the enclosing artifact's manifest (local
    artifacts only: a data job's output in an object store holds no nested artifact)."""
    if not isinstance(path, Path) or not isinstance(root, Path):
        return False
    return any(
        (parent / MANIFEST).is_file()
        for parent in path.parents
        if parent != root and root in parent.parents
    )


def unlisted_files(directory: str | os.PathLike, manifest: Mapping[str, Any]) -> list[str]:
    """Files the artifact holds that its manifest does not list (consumers never read them)."""
    root = storage.output_path(directory)
    listed = set(manifest["files"])
    return [
        rel
        for rel, _ in _listing(root)
        if rel not in listed and not _nested_artifact(root / rel, root)
    ]


def listed_path(directory: str | os.PathLike, manifest: Mapping[str, Any], rel: Any) -> Path:
    """The path of file `rel` of an artifact, which must be confined to it and listed in its
    manifest: every path a manifest field names (index files, prefixes) goes through here."""
    root = Path(directory)
    path = storage.confined(root, rel, f"manifest of {root}")
    assert isinstance(path, Path)  # a local root gives a local path
    if rel not in manifest["files"]:
        raise ArtifactError(
            f"{root}: {rel!r} is named by the manifest but not listed among its files; "
            "the artifact is corrupt or crafted: rebuild it"
        )
    return path


def write_manifest(
    directory: str | os.PathLike | storage.ObjectPath,
    kind: str,
    *,
    config: Mapping[str, Any] | None = None,
    inputs: Iterable[str | os.PathLike] = (),
    counts: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    known: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Hash every file under `directory` (but those `known`: `file_records`) and write its
    manifest last, atomically, sealed. `inputs`: the artifacts it was made from (lineage); `extra`:
    the kind's own fields (typed by `pretrain.artifacts.base.write_artifact`, the builders' writer).
    """
    root = storage.output_path(directory)  # a local directory, or an object-store prefix
    config = dict(config or {})
    files = file_records(root, known)
    lineage = [
        {
            "path": str(Path(inp).resolve()),
            "kind": load_manifest(inp)["kind"],
            "manifest_sha256": manifest_sha256(inp),
        }
        for inp in inputs
    ]
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "kind": kind,
        "created_unix": round(time.time(), 3),
        "command": current_command(),
        "config": config,
        "config_sha256": sha256_bytes(canonical_json(config)),
        "git": git_state(),
        "inputs": lineage,
        "files": files,
        "counts": dict(counts or {}),
        **dict(extra or {}),
    }
    manifest[SEAL] = seal_of(manifest)
    storage.write_json(root / MANIFEST, manifest)
    return manifest


def load_manifest(directory: str | os.PathLike | storage.ObjectPath) -> dict[str, Any]:
    path = storage.output_path(directory) / MANIFEST  # a local file, or an object-store key
    if not path.is_file():
        raise ArtifactError(
            f"{directory} is not a finished artifact (no {MANIFEST}); "
            "re-run the command that builds it"
        )
    try:
        manifest = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path} is not valid JSON ({exc}); rebuild the artifact") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{path} is not a JSON object; rebuild the artifact")
    common = {key: value for key, value in manifest.items() if key in COMMON_FIELDS}
    typed_or_refused(Manifest, common, path, "a manifest")
    return manifest


def manifest_sha256(directory: str | os.PathLike) -> str:
    """The artifact's identity: sha256 of its manifest bytes (which hold every file's sha256)."""
    path = storage.output_path(directory) / MANIFEST
    if not path.is_file():
        raise ArtifactError(f"{directory} is not a finished artifact (no {MANIFEST})")
    return sha256_file(path) if isinstance(path, Path) else storage.size_and_sha256(path)[1]


def verify(
    directory: str | os.PathLike, *, deep: bool = True, full: bool | None = None
) -> dict[str, Any]:
    """Check every listed file's bytes against its sha256; raise naming the first bad file.

    Hashes come from the project hash cache (pretrain.hashcache) when a file's identity is
    unchanged since it was last hashed; `full=True` (or PRETRAIN_VERIFY=full) re-hashes every
    byte. `deep=False` checks presence and sizes only (for progress displays, never for trust).
    An `s3://` output is verified in the store: every listed object read back and hashed.
    """
    root = storage.output_path(directory)
    manifest = load_manifest(root)
    remedy = f"rebuild it with the command in {root / MANIFEST} or restore the file"
    for rel, entry in sorted(manifest["files"].items()):
        path = storage.confined(root, rel, f"manifest of {root}")
        if not path.is_file():
            raise ArtifactError(f"{root}: file {rel} is missing; {remedy}")
        if path.stat().st_size != entry["bytes"]:
            raise ArtifactError(
                f"{root}: file {rel} has {path.stat().st_size} bytes, the manifest "
                f"says {entry['bytes']}; {remedy}"
            )
        if deep and storage.size_and_sha256(path, full)[1] != entry["sha256"]:
            raise ArtifactError(
                f"{root}: file {rel} does not match its sha256 in the manifest "
                f"(modified after it was written); {remedy}"
            )
    check_seal(root, manifest)
    return manifest


def require(
    directory: str | os.PathLike,
    *,
    kind: str | None = None,
    sha256: str | None = None,
    deep: bool = True,
    full: bool | None = None,
) -> dict[str, Any]:
    """Load and verify an artifact a command depends on (bytes, through the hash cache unless
    `full`); refuse with a one-line remedy."""
    root = Path(directory)
    if not root.exists():
        raise ArtifactError(f"artifact {root} does not exist; build it first or fix the path")
    manifest = load_manifest(root)
    if kind is not None and manifest["kind"] != kind:
        raise ArtifactError(
            f"{root} is a {manifest['kind']!r} artifact, this needs a {kind!r} "
            "artifact; pass the right directory"
        )
    if sha256 is not None:
        actual = manifest_sha256(root)
        if actual != sha256:
            raise ArtifactError(
                f"{root} has manifest sha256 {actual[:12]}..., expected "
                f"{sha256[:12]}...; it was rebuilt or replaced: rebuild what "
                "depends on it or pin the new hash"
            )
    return verify(root, deep=deep, full=full)
