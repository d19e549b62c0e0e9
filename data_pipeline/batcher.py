"""Raw rows of one unit of work collected into Arrow tables: row numbers, part names, unique ids.
A document's id is `<input stem>/<record id>` (its own id, else its place in the file); an id
repeated inside a file gets `#<row>` appended and counts in the ledger's `id_collisions`."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import xxhash

from data_pipeline.formats import InputFile
from pretrain.nested import META_TYPE, meta_entries
from pretrain.schema import split_for

RAW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("text", pa.string()),
        pa.field("url", pa.string()),
        pa.field("source", pa.string()),
        pa.field("meta", META_TYPE),
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


def clean_str(value: str) -> str:
    """Text Arrow can store: lone surrogates (from JSON escapes) become `?`."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")


class Batcher:
    """Collects raw rows of one unit of work (one input file, or small files packed: `start`
    begins each) into tables, numbering rows across the unit and naming its parts
    `<unit>-<part:05d>`; ids and `source` stay the file's."""

    def __init__(
        self,
        source: InputFile,
        shard_rows: int,
        batch_rows: int,
        eval_fraction: float,
        skip_parts: frozenset[str],
        unit: str,
    ) -> None:
        self.source, self.shard_rows, self.batch_rows = source, shard_rows, batch_rows
        self.unit = unit
        self.eval_fraction, self.skip_parts = eval_fraction, skip_parts
        self.rows: dict[str, list[Any]] = {name: [] for name in RAW_SCHEMA.names}
        self.count = 0
        self.bytes = 0
        self.collisions = 0
        self._seen: set[int] = set()  # 64-bit hashes of the ids given so far (8 bytes of key each)
        self.fields_without_text: list[str] = []
        """Set by a reader when no record of the file held the text field: the fields found."""

    def start(self, source: InputFile) -> None:
        """Read the next file of the unit: its rows follow the rows read so far."""
        self.source = source
        self.fields_without_text = []

    def unique_id(self, local_id: str, row: int) -> str:
        """`<stem>/<local_id>`, with `#<row>` appended when this file already gave that id."""
        doc_id = clean_str(f"{self.source.stem}/{local_id}")
        key = xxhash.xxh3_64_intdigest(doc_id)
        if key in self._seen:
            self.collisions += 1
            suffix = 0
            while key in self._seen:
                candidate = f"{doc_id}#{row}" + (f".{suffix}" if suffix else "")
                key, suffix = xxhash.xxh3_64_intdigest(candidate), suffix + 1
            doc_id = candidate
        self._seen.add(key)
        return doc_id

    def add(
        self,
        local_id: str,
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
        doc_id = self.unique_id(local_id, row)  # before the skip: a resumed run names rows alike
        shard = f"{self.unit}-{row // self.shard_rows:05d}"
        if shard in self.skip_parts:
            return
        values = {
            "id": doc_id,
            "text": text,
            "url": url,
            "source": source or f"{self.source.format}:{self.source.name}",
            "meta": meta_entries(meta, clean_str),
            "split": split_for(doc_id, self.eval_fraction),
            "_payload": payload,
            "_content_type": content_type,
            "_read_reason": reason,
            "_raw_bytes": raw_bytes,
            "_shard": shard,
            "_row": row,
        }
        for name, value in values.items():  # every string a record brings, cleaned alike
            self.rows[name].append(clean_str(value) if isinstance(value, str) else value)

    def full(self) -> bool:
        return len(self.rows["id"]) >= self.batch_rows

    def flush(self) -> pa.Table | None:
        if not self.rows["id"]:
            return None
        table = pa.Table.from_pydict(self.rows, schema=RAW_SCHEMA)
        self.rows = {name: [] for name in RAW_SCHEMA.names}
        return table
