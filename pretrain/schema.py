"""The versioned Arrow document schema: the base columns, then each stage's typed columns (declared by
the stage, `Stage.columns`; a stage that rejects adds `<stage>_reason`, null = passes)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import pyarrow as pa

from pretrain.errors import SchemaError
from pretrain.nested import META_TYPE

SCHEMA_VERSION_KEY = b"pretrain.schema_version"
SCHEMA_VERSION = 3
"""The one document schema (recorded in each shard's Arrow metadata): meta (typed entries, nested
objects as dotted keys), pii_counts and unsafe_categories are Arrow list/struct types
(pretrain.nested). No reader of another exists."""
EVAL_FRACTION = 0.005
"""Default share of documents whose stable split tag is `eval` (held out from every mixture)."""

BASE_FIELDS: tuple[pa.Field, ...] = (
    pa.field("id", pa.string(), nullable=False),
    pa.field("text", pa.string()),
    pa.field("url", pa.string()),
    pa.field("source", pa.string()),
    pa.field("meta", META_TYPE),  # the input record's other fields: typed {key, <slot>} entries
    pa.field("split", pa.string(), nullable=False),
)


def reason_column(stage: str) -> str:
    return f"{stage}_reason"


def document_schema(fields: Iterable[pa.Field] = ()) -> pa.Schema:
    """The schema of a table holding the base columns, then `fields` (stages' columns)."""
    return pa.schema(
        [*BASE_FIELDS, *fields], metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()}
    )


def split_for(doc_id: str, eval_fraction: float = EVAL_FRACTION) -> str:
    """Stable split tag from a hash of the id: the same id is `eval` in every run and version."""
    digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    unit = int.from_bytes(digest, "big") / 2**64
    return "eval" if unit < eval_fraction else "train"


def conform(table: pa.Table, fields: Iterable[pa.Field]) -> pa.Table:
    """Reorder and cast `table` to base + `fields` (same column names required)."""
    expected = document_schema(fields)
    missing = [n for n in expected.names if n not in table.column_names]
    if missing:
        raise SchemaError(f"cannot conform table: column(s) {', '.join(missing)} missing")
    return table.select(expected.names).cast(expected)
