"""Readers for raw inputs: WARC / WARC.gz (HTTP responses), HTML files, JSONL(.gz) and Parquet.

Each reader streams one input file as Arrow tables of raw records (`RAW_SCHEMA`): base columns plus
hidden `_`-prefixed columns the extract stage consumes (`_payload`, `_content_type`,
`_read_reason`) and the runner uses to name shards (`_shard`, `_row`, `_raw_bytes`).

A problem with one record (undecodable bytes, malformed JSON, missing text, a truncated record or a
stream that ends early) becomes a row with `_read_reason` set, never a crash or a silent loss. A
file that cannot be opened at all raises `InputError` naming it (or, with `on_unreadable:
reject`, becomes one reject row).
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from pretrain.errors import InputError
from pretrain.schema import split_for

RAW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("text", pa.string()),
        pa.field("url", pa.string()),
        pa.field("source", pa.string()),
        pa.field("meta", pa.string()),
        pa.field("split", pa.string(), nullable=False),
        pa.field("_payload", pa.binary()),
        pa.field("_content_type", pa.string()),
        pa.field("_read_reason", pa.string()),
        pa.field("_raw_bytes", pa.int64()),
        pa.field("_shard", pa.string()),
        pa.field("_row", pa.int64()),
    ]
)
"""What readers emit. Columns starting with `_` never reach the shards."""

FORMAT_SUFFIXES: tuple[tuple[str, str], ...] = (
    (".warc.gz", "warc"),
    (".warc", "warc"),
    (".arc.gz", "warc"),
    (".jsonl.gz", "jsonl"),
    (".ndjson.gz", "jsonl"),
    (".jsonl", "jsonl"),
    (".ndjson", "jsonl"),
    (".html.gz", "html"),
    (".htm.gz", "html"),
    (".html", "html"),
    (".htm", "html"),
    (".parquet", "parquet"),
)
"""Suffix -> format. Plain `.json` is not an input (artifact manifests are JSON)."""
_IO_ERRORS = (OSError, EOFError, zlib.error, gzip.BadGzipFile)


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


def _clean_str(value: str) -> str:
    """Text Arrow can store: lone surrogates (from JSON escapes) become U+FFFD."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")


class _Batcher:
    """Collects raw rows of one input file into tables, numbering rows and naming parts."""

    def __init__(
        self,
        source: InputFile,
        shard_rows: int,
        batch_rows: int,
        eval_fraction: float,
        skip_parts: frozenset[int],
    ) -> None:
        self.source, self.shard_rows, self.batch_rows = source, shard_rows, batch_rows
        self.eval_fraction, self.skip_parts = eval_fraction, skip_parts
        self.rows: dict[str, list[Any]] = {name: [] for name in RAW_SCHEMA.names}
        self.count = 0
        self.bytes = 0

    def add(
        self,
        doc_id: str,
        *,
        text: str | None = None,
        url: str | None = None,
        source: str | None = None,
        meta: dict | None = None,
        payload: bytes | None = None,
        content_type: str | None = None,
        reason: str | None = None,
        raw_bytes: int = 0,
    ) -> None:
        row, self.count = self.count, self.count + 1
        self.bytes += raw_bytes
        part = row // self.shard_rows
        if part in self.skip_parts:
            return
        doc_id = _clean_str(doc_id)
        values = {
            "id": doc_id,
            "text": _clean_str(text) if text is not None else None,
            "url": _clean_str(url) if url is not None else None,
            "source": source or f"{self.source.format}:{self.source.name}",
            "meta": _clean_str(json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str))
            if meta
            else None,
            "split": split_for(doc_id, self.eval_fraction),
            "_payload": payload,
            "_content_type": content_type,
            "_read_reason": reason,
            "_raw_bytes": raw_bytes,
            "_shard": f"{self.source.stem}-{part:05d}",
            "_row": row,
        }
        for name, value in values.items():
            self.rows[name].append(value)

    def full(self) -> bool:
        return len(self.rows["id"]) >= self.batch_rows

    def flush(self) -> pa.Table | None:
        if not self.rows["id"]:
            return None
        table = pa.Table.from_pydict(self.rows, schema=RAW_SCHEMA)
        self.rows = {name: [] for name in RAW_SCHEMA.names}
        return table


def _open_stream(filesystem: pafs.FileSystem, path: str, source: InputFile) -> io.BufferedIOBase:
    try:
        return filesystem.open_input_stream(path, compression=None)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(
            f"input {source.path}: cannot be opened ({exc}); fix the path or "
            "permissions, or set on_unreadable=reject"
        ) from None


def _maybe_gunzip(stream: Any, source: InputFile) -> Any:
    if source.path.lower().endswith(".gz"):
        head = stream.read(2)
        if head != b"\x1f\x8b":
            raise InputError(
                f"input {source.path}: not a gzip file (starts with {head!r}); "
                "fix the file or its .gz suffix"
            )
        return gzip.GzipFile(fileobj=io.BufferedReader(_Prepend(head, stream)))
    return io.BufferedReader(_Prepend(b"", stream))


class _Prepend(io.RawIOBase):
    """A raw stream with already-read bytes put back in front."""

    def __init__(self, head: bytes, stream: Any) -> None:
        self.head, self.stream = head, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.head:
            count = min(len(buffer), len(self.head))
            buffer[:count], self.head = self.head[:count], self.head[count:]
            return count
        data = self.stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def read_jsonl(stream: Any, out: _Batcher) -> Iterator[pa.Table]:
    """One row per non-blank line; bad lines become rows with a reason."""
    line_no = 0
    try:
        for line_no, raw in enumerate(stream, start=1):
            if not raw.strip():
                continue
            _jsonl_row(raw, f"{out.source.name}:{line_no}", out)
            if out.full():
                yield out.flush()
    except _IO_ERRORS as exc:
        out.add(
            f"{out.source.name}:{line_no + 1}",
            reason="truncated_input",
            meta={"error": str(exc)[:200]},
        )
    if (table := out.flush()) is not None:
        yield table


def _jsonl_row(raw: bytes, fallback_id: str, out: _Batcher) -> None:
    size = len(raw)
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        out.add(fallback_id, reason="undecodable", raw_bytes=size)
        return
    except ValueError:
        out.add(fallback_id, reason="malformed_json", raw_bytes=size)
        return
    if not isinstance(record, dict):
        out.add(fallback_id, reason="malformed_json", raw_bytes=size)
        return
    doc_id = record.get("id")
    doc_id = str(doc_id) if doc_id not in (None, "") else fallback_id
    text = record.get("text")
    reason = (
        "missing_text"
        if "text" not in record
        else None
        if isinstance(text, str)
        else "text_not_string"
    )
    meta = {k: v for k, v in record.items() if k not in ("id", "text", "url", "source")}
    if isinstance(record.get("meta"), dict):
        meta = {**{k: v for k, v in meta.items() if k != "meta"}, **record["meta"]}
    out.add(
        doc_id,
        text=text if reason is None else None,
        url=_str_or_none(record.get("url")),
        source=_str_or_none(record.get("source")),
        meta=meta,
        reason=reason,
        raw_bytes=size,
    )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def read_html(stream: Any, out: _Batcher) -> Iterator[pa.Table]:
    """A whole HTML file is one document."""
    try:
        payload = stream.read()
    except _IO_ERRORS as exc:
        out.add(out.source.name, reason="truncated_input", meta={"error": str(exc)[:200]})
    else:
        out.add(out.source.name, payload=payload, content_type="text/html", raw_bytes=len(payload))
    yield out.flush()


def read_warc(stream: Any, out: _Batcher) -> Iterator[pa.Table]:
    """HTTP response (and resource) records; a truncated record ends the file with a reject row."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    iterator = ArchiveIterator(stream, no_record_parse=False, arc2warc=True)
    offset = 0
    try:
        for record in iterator:
            if record.rec_type not in ("response", "resource"):
                continue
            offset = _warc_row(record, iterator, out)
            if out.full():
                yield out.flush()
    except (ArchiveLoadFailed, ValueError, *_IO_ERRORS) as exc:
        out.add(
            f"{out.source.name}@{offset}+",
            reason="truncated_record",
            meta={"error": str(exc)[:200]},
        )
    if (table := out.flush()) is not None:
        yield table


def _warc_row(record: Any, iterator: Any, out: _Batcher) -> int:
    payload = record.content_stream().read()  # before get_record_offset, which consumes it
    offset = iterator.get_record_offset()
    headers = record.rec_headers
    doc_id = headers.get_header("WARC-Record-ID") or f"{out.source.name}@{offset}"
    url = headers.get_header("WARC-Target-URI")
    meta: dict[str, Any] = {"warc_date": headers.get_header("WARC-Date")}
    content_type = None
    if record.http_headers is not None:
        content_type = record.http_headers.get_header("Content-Type")
        meta["http_status"] = record.http_headers.get_statuscode()
    elif record.rec_type == "resource":
        content_type = headers.get_header("Content-Type")
    meta["content_type"] = content_type
    out.add(
        doc_id.strip("<>"),
        url=url,
        meta=meta,
        payload=payload,
        content_type=content_type or "",
        raw_bytes=len(payload),
    )
    return offset


def read_parquet(
    source: InputFile, filesystem: pafs.FileSystem, path: str, out: _Batcher, text_column: str
) -> Iterator[pa.Table]:
    """Rows of a Parquet file; `text_column` is required, `id`/`url`/`source` used when present."""
    try:
        handle = filesystem.open_input_file(path)
        parquet = pq.ParquetFile(handle)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(
            f"input {source.path}: not a readable Parquet file ({exc}); fix or "
            "remove it, or set on_unreadable=reject"
        ) from None
    names = parquet.schema_arrow.names
    if text_column not in names:
        raise InputError(
            f"input {source.path}: Parquet file has no {text_column!r} column "
            f"(columns: {', '.join(names)}); set text_column or fix the file"
        )
    row = 0
    for batch in parquet.iter_batches(batch_size=1024):
        for record in batch.to_pylist():
            row += 1
            _parquet_row(record, text_column, f"{source.name}:{row}", out)
            if out.full():
                yield out.flush()
    if (table := out.flush()) is not None:
        yield table


def _parquet_row(record: dict[str, Any], text_column: str, fallback_id: str, out: _Batcher) -> None:
    text = record.get(text_column)
    doc_id = record.get("id")
    doc_id = str(doc_id) if doc_id not in (None, "") else fallback_id
    reason = (
        None if isinstance(text, str) else "missing_text" if text is None else "text_not_string"
    )
    meta = {k: v for k, v in record.items() if k not in (text_column, "id", "url", "source")}
    size = len(text.encode("utf-8", "replace")) if isinstance(text, str) else 0
    out.add(
        doc_id,
        text=text if reason is None else None,
        url=_str_or_none(record.get("url")),
        source=_str_or_none(record.get("source")),
        meta=meta,
        reason=reason,
        raw_bytes=size,
    )


def read_file(
    source: InputFile,
    *,
    shard_rows: int,
    batch_rows: int,
    eval_fraction: float,
    skip_parts: frozenset[int] = frozenset(),
    text_column: str = "text",
    on_unreadable: str = "error",
    stats: dict[str, int] | None = None,
) -> Iterator[pa.Table]:
    """Stream one input file as RAW_SCHEMA tables of at most `batch_rows` rows.

    Rows of parts in `skip_parts` (already written by an earlier run) are counted, not emitted.
    When the file is exhausted, `stats` holds the rows (`records`) and raw `bytes` it produced.
    """
    out = _Batcher(source, shard_rows, batch_rows, eval_fraction, skip_parts)
    yield from _read_into(source, out, text_column, on_unreadable)
    if stats is not None:
        stats.update(records=out.count, bytes=out.bytes)


def _read_into(
    source: InputFile, out: _Batcher, text_column: str, on_unreadable: str
) -> Iterator[pa.Table]:
    filesystem, path = filesystem_for(source.path)
    try:
        if source.format == "parquet":
            yield from read_parquet(source, filesystem, path, out, text_column)
            return
        stream = _maybe_gunzip(_open_stream(filesystem, path, source), source)
        reader = {"jsonl": read_jsonl, "html": read_html, "warc": read_warc}[source.format]
        for table in reader(stream, out):
            if table is not None:
                yield table
    except InputError as exc:
        if on_unreadable != "reject":
            raise
        out.add(source.name, reason="unreadable_file", meta={"error": str(exc)[:300]})
        yield out.flush()
