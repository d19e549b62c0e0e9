"""Reading training records (JSONL, JSONL.gz, Parquet, plain text) for the model trainers."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from pretrain.config import StrictModel
from pretrain.errors import InputError
from pretrain.progress import Progress


class RecordSource(StrictModel):
    """One training input file (.jsonl/.jsonl.gz, .parquet or plain text) and which records to use."""

    path: str
    text_field: str = "text"
    """Dotted field holding the document text (plain-text files: blank-line separated blocks)."""
    where: dict[str, str] = {}
    """Keep only records whose dotted field matches a regex, e.g. {source: "linux-doc|manpages"}."""
    max_records: int | None = Field(None, ge=1)

    @field_validator("where")
    @classmethod
    def _valid_patterns(cls, where: dict[str, str]) -> dict[str, str]:
        for field, pattern in where.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"where.{field}: {pattern!r} is not a valid regex ({exc})"
                ) from None
        return where

    def records(self, desc: str) -> Iterator[tuple[dict[str, Any], Any]]:
        """(record, its `text_field` value) of each record `where` accepts, with a progress bar."""
        for record in Progress(iter_records(self.path), desc=desc, unit="doc", leave=False):
            if self.accepts(record):
                yield record, field_value(record, self.text_field)

    def accepts(self, record: dict[str, Any]) -> bool:
        """True when every `where` pattern matches the record's field."""
        for field, pattern in self.where.items():
            value = field_value(record, field)
            if value is None or not re.search(pattern, str(value)):
                return False
        return True


def is_heldout(text: str, fraction: float) -> bool:
    """Whether `text` is in the held-out share `fraction`: by its hash, the same in every run."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction


def field_value(record: dict[str, Any], dotted: str) -> Any:
    """`record["meta"]["domain"]` for `dotted="meta.domain"`; None when any part is missing.

    A JSON object given as a string (some Parquet exports store `meta` that way) is parsed.
    """
    node: Any = record
    for part in dotted.split("."):
        if isinstance(node, str) and node.startswith("{"):
            try:
                node = json.loads(node)
            except ValueError:
                return None
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _jsonl_records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with _open_text(path) as handle:
            for line_number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    raise InputError(
                        f"{path} line {line_number} is not valid JSON; fix or remove that line"
                    ) from None
                if isinstance(record, dict):
                    yield record
    except (OSError, EOFError) as exc:
        raise InputError(f"{path} cannot be read ({exc}); check the file") from None


def _parquet_records(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        for batch in parquet.iter_batches(batch_size=1024):
            yield from batch.to_pylist()
    except OSError as exc:
        raise InputError(f"{path} is not a readable Parquet file ({exc}); check the file") from None


def _text_records(path: Path) -> Iterator[dict[str, Any]]:
    """Plain text: documents separated by blank lines."""
    with _open_text(path) as handle:
        block: list[str] = []
        for line in handle:
            if line.strip():
                block.append(line.rstrip("\n"))
            elif block:
                yield {"text": "\n".join(block)}
                block = []
        if block:
            yield {"text": "\n".join(block)}


def iter_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Records of one input file, chosen by suffix: .jsonl/.json(.gz), .parquet, else plain text."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file {path} does not exist; fix the path in the config")
    suffixes = [s.lower() for s in path.suffixes]
    if ".parquet" in suffixes:
        return _parquet_records(path)
    if ".jsonl" in suffixes or ".json" in suffixes:
        return _jsonl_records(path)
    return _text_records(path)
