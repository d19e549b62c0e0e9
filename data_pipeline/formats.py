"""Input formats: which file names are read as what, and byte streams with compression undone.

JSON Lines may be plain, gzip (`.jsonl.gz`, and Dolma's `.json.gz`) or zstd (`.jsonl.zst`: the
Pile, RedPajama); WARC and HTML plain or gzip; Parquet as is. A file whose first bytes do not
match its compression suffix is an `InputError` naming it.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyarrow import fs as pafs

from pretrain.errors import InputError

FORMAT_SUFFIXES: tuple[tuple[str, str], ...] = (
    (".warc.gz", "warc"),
    (".warc", "warc"),
    (".arc.gz", "warc"),
    (".jsonl.gz", "jsonl"),
    (".ndjson.gz", "jsonl"),
    (".json.gz", "jsonl"),  # Dolma: one JSON document per line, gzip
    (".jsonl.zst", "jsonl"),  # the Pile, RedPajama
    (".jsonl.zstd", "jsonl"),
    (".json.zst", "jsonl"),
    (".jsonl", "jsonl"),
    (".ndjson", "jsonl"),
    (".html.gz", "html"),
    (".htm.gz", "html"),
    (".html", "html"),
    (".htm", "html"),
    (".parquet", "parquet"),
)
"""Suffix -> format. Plain `.json` is not an input (artifact manifests are JSON)."""

READABLE = (
    "WARC (.warc, .warc.gz), HTML, JSON Lines (.jsonl, .jsonl.gz, .json.gz, .jsonl.zst), Parquet"
)
"""What `detect_format` accepts, for messages."""

CHUNK = 1 << 20
_MAGIC = {".gz": (b"\x1f\x8b", "gzip"), ".zst": (b"\x28\xb5\x2f\xfd", "zstd")}
_MAGIC[".zstd"] = _MAGIC[".zst"]


@dataclass(frozen=True)
class InputFile:
    """One raw input: a path or URI, its format and the stem its shards are named after."""

    path: str
    format: str
    stem: str

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


def detect_format(path: str) -> tuple[str, str] | None:
    """(format, stem) from the file name, or None when the suffix is not a known input format."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    lower = name.lower()
    for suffix, fmt in FORMAT_SUFFIXES:
        if lower.endswith(suffix) and len(name) > len(suffix):
            return fmt, name[: -len(suffix)]
    return None


def compression_of(path: str) -> tuple[bytes, str] | None:
    """(magic bytes, codec) when the file name says it is compressed, else None."""
    lower = path.lower()
    return next((magic for suffix, magic in _MAGIC.items() if lower.endswith(suffix)), None)


def check_magic(path: str, head: bytes) -> None:
    """Raise InputError when `head` (the file's first bytes) does not match its suffix."""
    expected = compression_of(path)
    if expected is not None and not head.startswith(expected[0]):
        raise InputError(
            f"input {path}: not a {expected[1]} file (starts with {head[:4]!r}); fix the "
            "file or its suffix, or set on_unreadable=reject"
        )


def filesystem_for(path: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path inside it, for local paths and URIs (s3://, gs://, ...)."""
    if "://" in path:
        try:
            return pafs.FileSystem.from_uri(path)
        except (pa.ArrowInvalid, OSError, ValueError) as exc:
            raise InputError(
                f"input {path}: cannot open this URI ({exc}); check the scheme and "
                "credentials, or copy the file locally"
            ) from None
    return pafs.LocalFileSystem(), str(path)


def decoded_stream(stream: Any, source: InputFile) -> Any:
    """A buffered reader of the file's bytes with gzip / zstd undone (checked by magic bytes); a
    WARC's gzip is left to warcio (data_pipeline.warc), which reads it member by member."""
    raw = io.BufferedReader(stream)
    compression = compression_of(source.path)
    if compression is None:
        return raw
    check_magic(source.path, raw.peek(len(compression[0])))
    if source.format == "warc":
        return raw
    if compression[1] == "gzip":
        return gzip.GzipFile(fileobj=raw)
    return io.BufferedReader(pa.CompressedInputStream(raw, "zstd"))


def drain(stream: Any, *, line: bool = False) -> int:
    """Read and drop the rest of a record (to the end of the line when `line`): its size."""
    size = 0
    while chunk := (stream.readline(CHUNK) if line else stream.read(CHUNK)):
        size += len(chunk)
        if line and chunk.endswith(b"\n"):
            break
    return size
