"""Where a data job writes: a local `Path`, or an `ObjectPath` (`s3://bucket/prefix`, a pyarrow
filesystem) with the subset of `pathlib.Path` the writers use, so the same code writes either;
`write_atomic` makes a file (or object) visible whole, `size_and_sha256` re-reads an object's bytes."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pyarrow import fs as pafs

from pretrain.errors import ArtifactError, ConfigError
from pretrain.hashcache import cache_root, file_sha256

READ_CHUNK = 8 << 20


def is_uri(output: str | os.PathLike) -> bool:
    return "://" in str(output) and not str(output).startswith("file://")


def output_path(output: str | os.PathLike | ObjectPath) -> Path | ObjectPath:
    """A local `Path` (a `file://` URI too), or an `ObjectPath` for `s3://`, `gs://`, ..."""
    if isinstance(output, ObjectPath):
        return output
    text = str(output)
    if text.startswith("file://"):
        return Path(text.removeprefix("file://"))
    if not is_uri(text):
        return Path(text)
    try:
        filesystem, base = _from_uri(text)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ConfigError(
            f"output = {text!r}: not a filesystem URI pyarrow can open ({exc})"
        ) from None
    scheme = text.split("://", 1)[0]
    return ObjectPath(filesystem, base.rstrip("/"), f"{scheme}://")


def lock_target(output: str | os.PathLike) -> str | os.PathLike:
    """What `pretrain.locking` locks for `output`: the directory itself; an `s3://` URI itself (a
    lock object in the store holds across machines); for any other URI
    (`gs://`, `hdfs://`, ...) a local stand-in under the project cache, which keeps out a second
    writer on this machine only."""
    if not is_uri(output):
        return output
    if str(output).startswith("s3://"):
        return str(output)
    digest = hashlib.sha256(str(output).rstrip("/").encode()).hexdigest()[:24]
    return cache_root() / "output-locks" / digest / "output"


@functools.lru_cache(maxsize=32)
def _from_uri(text: str) -> tuple[pafs.FileSystem, str]:
    """One filesystem per output URI and process: creating an S3 client costs ~0.5 s."""
    return pafs.FileSystem.from_uri(text)


@dataclass(frozen=True)
class _Stat:
    st_size: int


class ObjectPath:
    """A key (or key prefix) in an object store, with the `pathlib.Path` subset the writers use."""

    def __init__(self, filesystem: pafs.FileSystem, key: str, scheme: str) -> None:
        self.fs, self.key, self.scheme = filesystem, key.rstrip("/"), scheme

    def __reduce__(self) -> tuple[Any, ...]:  # travels to Ray workers by URI, credentials not
        return (output_path, (str(self),))

    def __str__(self) -> str:
        return f"{self.scheme}{self.key}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and str(other) == str(self)

    def __hash__(self) -> int:
        return hash(str(self))

    def __truediv__(self, part: str | os.PathLike) -> ObjectPath:
        return ObjectPath(self.fs, f"{self.key}/{str(part).strip('/')}", self.scheme)

    @property
    def name(self) -> str:
        return PurePosixPath(self.key).name

    @property
    def stem(self) -> str:
        return PurePosixPath(self.key).stem

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.key).suffix

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(self.fs, str(PurePosixPath(self.key).parent), self.scheme)

    def relative_to(self, other: ObjectPath) -> PurePosixPath:
        return PurePosixPath(self.key).relative_to(other.key)

    def _info(self) -> pafs.FileInfo:
        return self.fs.get_file_info(self.key)

    def is_file(self) -> bool:
        return self._info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        return self._info().type == pafs.FileType.Directory

    def exists(self) -> bool:
        return self._info().type != pafs.FileType.NotFound

    def stat(self) -> _Stat:
        info = self._info()
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(str(self))
        return _Stat(int(info.size))

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to create: a prefix exists once a key under it does."""

    def read_bytes(self) -> bytes:
        try:
            with self.fs.open_input_stream(self.key) as handle:
                return handle.read()
        except FileNotFoundError:
            raise
        except OSError as exc:
            if not self.is_file():
                raise FileNotFoundError(str(self)) from exc
            raise

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> int:
        return self.write_chunks([data])

    def write_chunks(self, chunks: Iterable[Any]) -> int:
        """Write the bytes-like `chunks` in order as one object without joining them: a
        multipart upload (pyarrow's stream uploads a part once it holds one, and `flush` after
        each chunk waits for those in flight, so a writer holds about a part and a chunk). The
        object appears when the last chunk is written; an error from the chunks (or the store)
        deletes what the stream completed on close, so no partial object stays under the key."""
        if self.fs.type_name != "s3":  # S3 has no directories; a local or HDFS store has
            self.fs.create_dir(str(PurePosixPath(self.key).parent), recursive=True)
        written = 0
        try:
            with self.fs.open_output_stream(self.key) as handle:
                for chunk in chunks:
                    handle.write(chunk)
                    handle.flush()
                    written += len(chunk)
        except BaseException:
            with contextlib.suppress(Exception):  # the error that stopped the write is raised
                self.unlink(missing_ok=True)
            raise
        return written

    def unlink(self, missing_ok: bool = False) -> None:
        if not self.is_file():
            if missing_ok:
                return
            raise FileNotFoundError(str(self))
        self.fs.delete_file(self.key)

    def __lt__(self, other: ObjectPath) -> bool:
        return str(self) < str(other)

    def _list(self, recursive: bool) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(self.key, allow_not_found=True, recursive=recursive)
        return sorted(self.fs.get_file_info(selector), key=lambda info: info.path)

    def iterdir(self) -> list[ObjectPath]:
        """Keys and prefixes directly under this prefix."""
        return [ObjectPath(self.fs, info.path, self.scheme) for info in self._list(False)]

    def infos(self) -> list[pafs.FileInfo]:
        """The listing under this prefix (keys with their size and modification time), sorted:
        one request per thousand keys, none per object."""
        return self._list(False)

    def files_and_sizes(self) -> list[tuple[ObjectPath, int]]:
        """Every key under this prefix with its size, from the listing alone."""
        return [
            (ObjectPath(self.fs, i.path, self.scheme), int(i.size))
            for i in self._list(True)
            if i.type == pafs.FileType.File
        ]

    def glob(self, pattern: str) -> list[ObjectPath]:
        """Entries directly under this prefix whose name matches `pattern` (no `/`, no `**`)."""
        if "/" in pattern:
            raise ValueError(f"ObjectPath.glob takes a name pattern, not {pattern!r}")
        return [p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern)]

    def rglob(self, pattern: str) -> list[ObjectPath]:
        return [p for p, _ in self.files_and_sizes() if fnmatch.fnmatchcase(p.name, pattern)]


OutPath = Path | ObjectPath
"""Where a data job's files go: a local directory or an object-store prefix."""


def listed(path: OutPath, pattern: str) -> list[OutPath]:
    """`sorted(path.glob(pattern))` for either kind of path (names directly under `path`)."""
    return sorted(path.glob(pattern), key=str)


def write_atomic(
    path: OutPath | str | os.PathLike, data: bytes | Iterable[Any], *, durable: bool = True
) -> None:
    """Make `data` (bytes, or bytes-like chunks written in order, never joined) visible under
    `path` all at once (locally: a temporary file, fsync, rename; in an object store: one PUT or
    a multipart upload completed on close). `durable=False` skips the fsync and the chmod:
    for scratch files a crash re-makes (per file, an fsync cost more wall than a dedup step's
    work on a busy disk)."""
    chunks: Iterable[Any] = [data] if isinstance(data, bytes) else data
    if isinstance(path, ObjectPath):
        path.write_chunks(chunks)
        return
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if durable:
            os.chmod(tmp, 0o644)  # mkstemp creates 0600; artifacts are read by other users too
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: the temporary file goes, the error names `path`
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def confined(root: OutPath, rel: Any, what: str) -> OutPath:
    """`root / rel` for a relative file name recorded in `what` (a manifest, a ledger fragment, a
    map record), refusing in one line a name that is not a non-empty string, is absolute, holds
    `..`, or (locally) resolves through a link to outside `root`: a record names only its own
    output's files, so a crafted one cannot make a reader hash or open any other path."""
    parts = PurePosixPath(rel).parts if isinstance(rel, str) else ()
    if not parts or rel.startswith("/") or ".." in parts:
        raise ArtifactError(
            f"{what} lists file path {rel!r}, which leaves the artifact directory {root}; "
            "the output is corrupt or crafted: rebuild it"
        )
    if isinstance(root, ObjectPath):  # a key under the prefix: no links to follow
        return root / rel
    resolved = (root / rel).resolve()
    if root.resolve() not in resolved.parents:
        raise ArtifactError(
            f"{what} lists file path {rel!r}, which resolves outside the artifact directory "
            f"{root} (a link); the output is corrupt or crafted: rebuild it"
        )
    return resolved


def remove_tree(path: OutPath) -> None:
    """Delete a directory (or key prefix) and everything under it; nothing if it is absent. A
    local path that is a symlink is removed as the link: its target is never touched."""
    if isinstance(path, ObjectPath):
        kind = path._info().type
        if kind == pafs.FileType.Directory:
            path.fs.delete_dir(path.key)
        elif kind == pafs.FileType.File:
            path.fs.delete_file(path.key)
    elif path.is_symlink():  # a link (to a directory or not) goes; never what it points at
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)  # links inside are unlinked, not followed
    else:
        path.unlink(missing_ok=True)


def json_bytes(obj: Any) -> bytes:
    """The bytes every JSON record and manifest of ours holds for `obj` (one serialization, so a
    writer can hand over or hash what it wrote without reading it back)."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False).encode()


def write_json(path: OutPath | str | os.PathLike, obj: Any) -> None:
    """`obj` as JSON (`json_bytes`), written by `write_atomic`."""
    write_atomic(path, json_bytes(obj))


def size_and_sha256(path: OutPath, full: bool | None = None) -> tuple[int, str]:
    """(bytes, sha256) of a file: the hash cache locally (`full` as in `file_sha256`); for an
    object, every byte read back from the store in one read (no extra HEAD request)."""
    if not isinstance(path, ObjectPath):
        return path.stat().st_size, file_sha256(path, full=full)
    digest, size = hashlib.sha256(), 0
    with path.fs.open_input_stream(path.key) as handle:
        while chunk := handle.read(READ_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
