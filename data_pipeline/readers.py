"""Readers of raw inputs (WARC, HTML, JSON Lines plain/gzip/zstd, Parquet) into `batcher.RAW_SCHEMA`
tables. A bad record is a row with `_read_reason` set, never a crash or a silent loss; a file that
cannot be opened at all is an `InputError` naming it (or, with `on_unreadable: reject`, one
reject row). A value a field (`text_field`, ...) takes is not repeated in `meta`."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from data_pipeline.batcher import Batcher
from data_pipeline.formats import InputFile, check_magic, decoded_stream, drain, filesystem_for
from data_pipeline.warc import read_warc
from pretrain.errors import InputError

_IO_ERRORS = (OSError, EOFError, zlib.error, gzip.BadGzipFile)
JSONL_LINE_FACTOR = 8
"""A JSON Lines record may take this many times `max_input_bytes` on its line (JSON escapes
write one UTF-8 byte as up to 6; other fields ride along) before it is rejected unparsed."""
MAX_JSON_DEPTH = 256
"""A JSON Lines record nested deeper than this (objects and arrays) is `malformed_json`. Python's
parser gives up at a depth set by how deep the caller's stack already is, which differs between
the processes that read one file (a Ray worker, the CLI, a test), so without a cap below it the
same line could be a document in one run and a reject in another."""
_TOO_DEEP = object()
# A damaged footer or page can also decode to invalid UTF-8 (UnicodeDecodeError, a ValueError):
# in a column name when the file opens, or in a string column when a batch is read.
_PARQUET_ERRORS = (OSError, pa.ArrowException, ValueError)


@dataclass(frozen=True)
class Fields:
    """Where JSON Lines and Parquet records keep their text, id, URL and source."""

    text: str = "text"
    id: str = "id"
    url: str = "url"
    source: str = "source"


def field_value(record: dict[str, Any], name: str) -> Any:
    """`record[name]`, or for a dotted name the nested value (None when any step is missing)."""
    if name in record:
        return record[name]
    value: Any = record
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _without(record: dict[str, Any], name: str) -> dict[str, Any]:
    """`record` less the value `field_value(record, name)` reads (copies on the path, never
    changes `record`); an object left empty goes too."""
    if name in record or "." not in name:
        return {k: v for k, v in record.items() if k != name}
    head, _, rest = name.partition(".")
    inner = record.get(head)
    if not isinstance(inner, dict):
        return record
    kept = _without(inner, rest)
    return {k: v for k, v in record.items() if k != head} | ({head: kept} if kept else {})


def _open_stream(filesystem: pafs.FileSystem, path: str, source: InputFile) -> Any:
    try:
        return filesystem.open_input_stream(path, compression=None)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(
            f"input {source.path}: cannot be opened ({exc}); fix the path or "
            "permissions, or set on_unreadable=reject"
        ) from None


def read_jsonl(
    stream: Any, out: Batcher, fields: Fields, max_bytes: int | None = None
) -> Iterator[pa.Table]:
    """One row per non-blank line; bad lines become rows with a reason. A line longer than
    `JSONL_LINE_FACTOR * max_bytes` is a `too_large` row, skipped without being held. In a
    .jsonl.gz, a corrupt gzip member ends the file as one `corrupt_gzip` row (a file cut inside a
    member: `truncated_input`); the lines before it are kept."""
    limit = JSONL_LINE_FACTOR * max_bytes if max_bytes is not None else -1
    line_no = 0
    found, found_fields = False, set[str]()
    try:
        while raw := stream.readline(limit + 1 if limit >= 0 else -1):
            line_no += 1
            fallback_id = f"{out.source.name}:{line_no}"
            if limit >= 0 and len(raw) > limit and not raw.endswith(b"\n"):
                size = len(raw) + drain(stream, line=True)
                out.add(fallback_id, reason="too_large", raw_bytes=size)
            elif raw.strip() and (record := _jsonl_row(raw, fallback_id, out, fields)):
                found = found or _has_text(record, fields, found_fields)
            if out.full():
                yield out.flush()
    except _IO_ERRORS as exc:
        error = {"error": str(exc)[:200]}
        out.add(f"{out.source.name}:{line_no + 1}", reason=_damage(exc), meta=error)
    if found_fields and not found:  # the caller refuses the file unless rejects are asked for
        out.fields_without_text = sorted(found_fields)
    if (table := out.flush()) is not None:
        yield table


def _damage(exc: BaseException) -> str:
    """The reject reason of a read error: zlib refused a gzip member, or the stream ended early."""
    return "corrupt_gzip" if isinstance(exc, zlib.error | gzip.BadGzipFile) else "truncated_input"


def _has_text(record: dict[str, Any], fields: Fields, found_fields: set[str]) -> bool:
    """Whether `record` holds the text field (null included); else its top-level keys join
    `found_fields`."""
    if fields.text in record or field_value(record, fields.text) is not None:
        return True
    if len(found_fields) < 100:
        found_fields.update(str(key) for key in record)
    return False


def _jsonl_row(raw: bytes, fallback_id: str, out: Batcher, fields: Fields) -> dict[str, Any] | None:
    """The line as a row of `out`; returns the record when the line held a JSON object."""
    size = len(raw)
    try:
        # utf-8-sig: a byte order mark (a file saved by Windows tools, or several such files
        # concatenated) is not part of the JSON; json.loads refused the whole line for it
        record = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        out.add(fallback_id, reason="undecodable", raw_bytes=size)
        return None
    except RecursionError:  # deeper than the stack allows: deeper than MAX_JSON_DEPTH too
        record = _TOO_DEEP
    except ValueError:
        out.add(fallback_id, reason="malformed_json", raw_bytes=size)
        return None
    if record is _TOO_DEEP or (
        raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _nested_deeper(record)
    ):
        error = {"error": f"nested deeper than {MAX_JSON_DEPTH}"}
        out.add(fallback_id, reason="malformed_json", meta=error, raw_bytes=size)
        return None
    if not isinstance(record, dict):
        out.add(fallback_id, reason="malformed_json", raw_bytes=size)
        return None
    _record_row(record, fields, fallback_id, out, size)
    return record


def _nested_deeper(record: Any) -> bool:
    """Whether objects and arrays nest deeper than `MAX_JSON_DEPTH` in `record` (itself depth 1)."""
    stack: list[tuple[Any, int]] = [(record, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _record_row(
    record: dict[str, Any],
    fields: Fields,
    fallback_id: str,
    out: Batcher,
    size: int | None,
) -> None:
    """One JSON or Parquet record -> a raw row (`size` None: the text's UTF-8 bytes); the fields
    it did not take are its `meta` (pretrain.nested: typed, nested objects as dotted keys)."""
    text = field_value(record, fields.text)
    reason = (
        None if isinstance(text, str) else "missing_text" if text is None else "text_not_string"
    )
    meta = record
    for name in (fields.id, fields.text, fields.url, fields.source):
        meta = _without(meta, name)
    if size is None:
        size = len(text.encode("utf-8", "replace")) if isinstance(text, str) else 0
    out.add(
        _record_id(record, fields, fallback_id),
        text=text if reason is None else None,
        url=_str_or_none(field_value(record, fields.url)),
        source=_str_or_none(field_value(record, fields.source)),
        meta=meta,
        reason=reason,
        raw_bytes=size,
    )


def _record_id(record: dict[str, Any], fields: Fields, fallback_id: str) -> str:
    doc_id = field_value(record, fields.id)
    return str(doc_id) if doc_id not in (None, "") else fallback_id


def _cell_bytes(value: Any) -> int:
    """Bytes of the strings and binaries in one (possibly nested) Parquet cell."""
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", "replace"))
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, dict):
        return sum(_cell_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_cell_bytes(v) for v in value)
    return 0


def _oversize(record: dict[str, Any], fields: Fields, max_bytes: int | None) -> int | None:
    """The record's text bytes when it is over the caps (read_parquet's docstring), else None."""
    if max_bytes is None:
        return None
    text_bytes = _cell_bytes(field_value(record, fields.text))
    total = sum(_cell_bytes(v) for v in record.values())
    if text_bytes > max_bytes or total > JSONL_LINE_FACTOR * max_bytes:
        return text_bytes  # what the ledger counts of any Parquet record
    return None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def read_html(
    stream: Any, out: Batcher, fields: Fields, max_bytes: int | None = None
) -> Iterator[pa.Table]:
    """A whole HTML file is one document (`too_large`, not held, past `max_bytes`). A damaged
    .html.gz is one `corrupt_gzip` (or, cut short, `truncated_input`) row."""
    try:
        payload = stream.read(max_bytes + 1 if max_bytes is not None else -1)
        oversize = max_bytes is not None and len(payload) > max_bytes
        size = len(payload) + (drain(stream) if oversize else 0)
    except _IO_ERRORS as exc:
        out.add(out.source.name, reason=_damage(exc), meta={"error": str(exc)[:200]})
    else:
        if oversize:
            out.add(out.source.name, reason="too_large", raw_bytes=size)
        else:
            out.add(out.source.name, payload=payload, content_type="text/html", raw_bytes=size)
    yield out.flush()


def read_parquet(
    source: InputFile,
    filesystem: pafs.FileSystem,
    path: str,
    out: Batcher,
    fields: Fields,
    max_bytes: int | None = None,
) -> Iterator[pa.Table]:
    """Rows of a Parquet file, decoded `batch_rows` records at a time. A record whose text is over
    `max_bytes`, or whose cells total more than `JSONL_LINE_FACTOR * max_bytes`, is a `too_large`
    row with none of its cells; a string cell that is not UTF-8 makes an `undecodable` row; a
    damaged page is one `truncated_input` row for the rest of its row group."""
    parquet = _open_parquet(source, filesystem, path, fields.text)
    batch_size = max(1, min(1024, out.batch_rows))
    row = 0
    for group in range(parquet.num_row_groups):
        first = row
        try:
            for batch in parquet.iter_batches(batch_size=batch_size, row_groups=[group]):
                for record in _batch_records(batch):
                    row += 1
                    _parquet_row(record, source, row, out, fields, max_bytes)
                    if out.full():
                        yield out.flush()
        except _PARQUET_ERRORS as exc:  # a damaged page: what was read stays, the rest one row
            out.add(
                f"{source.name}:{row + 1}+",
                reason="truncated_input",
                meta={"error": str(exc)[:200], "row_group": str(group)},
            )
            row = max(row, first + parquet.metadata.row_group(group).num_rows)
    if (table := out.flush()) is not None:
        yield table


def _open_parquet(
    source: InputFile, filesystem: pafs.FileSystem, path: str, text_field: str
) -> pq.ParquetFile:
    try:
        parquet = pq.ParquetFile(filesystem.open_input_file(path))
        names = parquet.schema_arrow.names
    except _PARQUET_ERRORS as exc:
        raise InputError(
            f"input {source.path}: not a readable Parquet file ({exc}); fix or "
            "remove it, or set on_unreadable=reject"
        ) from None
    if text_field.split(".")[0] not in names:
        raise InputError(
            f"input {source.path}: Parquet file has no {text_field!r} column "
            f"(columns: {', '.join(names)}); set text_field or fix the file"
        )
    return parquet


def check_openable(item: InputFile, text_field: str) -> None:
    """Fail fast, in the driver, on a file that cannot be read at all (one line naming it)."""
    filesystem, path = filesystem_for(item.path)
    if item.format == "parquet":
        _open_parquet(item, filesystem, path, text_field)
        return
    try:
        with filesystem.open_input_stream(path, compression=None) as handle:
            head = handle.read(4)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InputError(
            f"input {item.path}: cannot be read ({exc}); fix or remove it, or set "
            "on_unreadable=reject"
        ) from None
    check_magic(item.path, head)


def _batch_records(batch: pa.RecordBatch) -> list[dict[str, Any] | None]:
    """The records of `batch`; None for one with a string cell that is not UTF-8 (writers such
    as Spark do not check): the others are still read."""
    try:
        return batch.to_pylist()
    except ValueError:  # UnicodeDecodeError: find the records it is in
        records: list[dict[str, Any] | None] = []
        for at in range(batch.num_rows):
            try:
                records.append(batch.slice(at, 1).to_pylist()[0])
            except ValueError:
                records.append(None)
        return records


def _parquet_row(
    record: dict[str, Any] | None,
    source: InputFile,
    row: int,
    out: Batcher,
    fields: Fields,
    max_bytes: int | None,
) -> None:
    fallback_id = f"{source.name}:{row}"
    if record is None:
        out.add(fallback_id, reason="undecodable", meta={"error": "a string cell is not UTF-8"})
    elif (size := _oversize(record, fields, max_bytes)) is not None:
        out.add(_record_id(record, fields, fallback_id), reason="too_large", raw_bytes=size)
    else:
        _record_row(record, fields, fallback_id, out, None)


def read_unit(
    files: Sequence[InputFile],
    unit: str,
    *,
    shard_rows: int,
    batch_rows: int,
    eval_fraction: float,
    skip_parts: frozenset[str] = frozenset(),
    fields: Fields = Fields(),
    on_unreadable: str = "error",
    stats: list[dict[str, Any]] | None = None,
    max_input_bytes: int | None = None,
) -> Iterator[pa.Table]:
    """Stream the files of a unit of work in turn as RAW_SCHEMA tables of at most `batch_rows`
    rows: rows numbered across the unit, parts named `<unit>-<part:05d>`, the small tables that end
    each file joined (10,000 one-document files are 40 batches, not 10,000). A record over
    `max_input_bytes` (the extract stage's; a JSON line over `JSONL_LINE_FACTOR` times it) is read
    past, counted and a `too_large` row: a compression bomb costs no memory. Rows of parts in
    `skip_parts` are counted, not emitted. `stats` gets each file's {stem, records, bytes,
    id_collisions} as it is exhausted."""
    out = Batcher(files[0], shard_rows, batch_rows, eval_fraction, skip_parts, unit)
    pending: list[pa.Table] = []
    for source in files:
        count, size, collisions = out.count, out.bytes, out.collisions
        out.start(source)
        for table in _read_into(source, out, fields, on_unreadable, max_input_bytes):
            if table.num_rows >= batch_rows:  # a full batch goes as read, after what is held
                if pending:
                    yield pa.concat_tables(pending)
                    pending = []
                yield table
                continue
            pending.append(table)
            if sum(t.num_rows for t in pending) >= batch_rows:
                yield pa.concat_tables(pending)
                pending = []
        if stats is not None:
            stats.append(
                {
                    "stem": source.stem,
                    "records": out.count - count,
                    "bytes": out.bytes - size,
                    "id_collisions": out.collisions - collisions,
                }
            )
    if pending:
        yield pa.concat_tables(pending)


def _read_into(
    source: InputFile, out: Batcher, fields: Fields, on_unreadable: str, max_bytes: int | None
) -> Iterator[pa.Table]:
    filesystem, path = filesystem_for(source.path)
    try:
        if source.format == "parquet":
            yield from read_parquet(source, filesystem, path, out, fields, max_bytes)
            return
        try:
            stream = decoded_stream(_open_stream(filesystem, path, source), source)
        except _IO_ERRORS as exc:
            raise InputError(
                f"input {source.path}: cannot be read ({exc}); fix or remove it, or set "
                "on_unreadable=reject"
            ) from None
        reader = {"jsonl": read_jsonl, "html": read_html, "warc": read_warc}[source.format]
        for table in reader(stream, out, fields, max_bytes):
            if table is not None:
                yield table
        if out.fields_without_text and on_unreadable != "reject":
            raise InputError(
                f"input {source.path}: no record has the text field {fields.text!r} (fields "
                f"found: {', '.join(out.fields_without_text[:20])}); set text_field (a dotted "
                "path for a nested one), or on_unreadable=reject to count them as rejects"
            )
    except InputError as exc:
        if on_unreadable != "reject":
            raise
        out.add(source.name, reason="unreadable_file", meta={"error": str(exc)[:300]})
        yield out.flush()
