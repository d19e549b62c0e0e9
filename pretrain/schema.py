"""The versioned Arrow document schema and the registry of the columns each stage adds.

Base columns exist from extraction on. Every stage appends its typed columns (and, when it can
reject, a `<stage>_reason` column: null = passes) and keeps rows. Mixtures select on these tags.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import pyarrow as pa

from pretrain.errors import SchemaError
from pretrain.nested import CATEGORIES_TYPE, META_TYPE, PII_COUNTS_TYPE, SCHEMA_VERSION_KEY

SCHEMA_VERSION = 2
"""2: meta, pii_counts and unsafe_categories are Arrow list/struct types (pretrain.nested), were
JSON / comma-separated strings in 1 (read through pretrain.nested.upgrade)."""
EVAL_FRACTION = 0.005
"""Default share of documents whose stable split tag is `eval` (held out from every mixture)."""

BASE_FIELDS: tuple[pa.Field, ...] = (
    pa.field("id", pa.string(), nullable=False),
    pa.field("text", pa.string()),
    pa.field("url", pa.string()),
    pa.field("source", pa.string()),
    pa.field("meta", META_TYPE),  # the input record's pass-through object, {key, value} entries
    pa.field("split", pa.string(), nullable=False),
)

_F32 = pa.float32()
_I32 = pa.int32()
_STR = pa.string()

STAGE_COLUMNS: dict[str, tuple[pa.Field, ...]] = {
    "extract": (
        pa.field("extract_reason", _STR),
        pa.field("extractor", _STR),
        pa.field("num_bytes", pa.int64()),
        pa.field("control_chars", _I32),  # control characters cleaning replaced or dropped
    ),
    "langid": (
        pa.field("lang", _STR),
        pa.field("lang_score", _F32),
        pa.field("langid_reason", _STR),
    ),
    "domain": (
        pa.field("domain", _STR),
        pa.field("domain_score", _F32),
    ),
    "quality": (pa.field("quality_score", _F32),),
    "rules": (
        pa.field("num_words", _I32),
        pa.field("mean_word_length", _F32),
        pa.field("symbol_ratio", _F32),
        pa.field("bullet_line_ratio", _F32),
        pa.field("ellipsis_line_ratio", _F32),
        pa.field("alpha_word_ratio", _F32),
        pa.field("stop_word_count", _I32),
        pa.field("dup_line_frac", _F32),
        pa.field("dup_para_frac", _F32),
        pa.field("dup_line_char_frac", _F32),
        pa.field("dup_para_char_frac", _F32),
        pa.field("top_ngram_char_frac", _F32),  # max over n = 2..4 (Gopher)
        pa.field("dup_ngram_char_frac", _F32),  # max over n = 5..10 (Gopher)
        pa.field("c4_bad_line_frac", _F32),
        pa.field("line_punct_ratio", _F32),  # FineWeb: lines ending in punctuation
        pa.field("short_line_ratio", _F32),  # FineWeb
        pa.field("char_dup_ratio", _F32),  # FineWeb: chars in duplicated lines
        pa.field("newline_char_ratio", _F32),  # FineWeb: newlines per word (list ratio)
        pa.field("garbled_ratio", _F32),
        pa.field("log_like_ratio", _F32),
        pa.field("rules_reason", _STR),
    ),
    "safety": (
        pa.field("url_blocked", pa.bool_()),
        pa.field("unsafe_score", _F32),
        pa.field("unsafe_categories", CATEGORIES_TYPE),  # category names, [] when none
        pa.field("pii_counts", PII_COUNTS_TYPE),  # redactions made in `text`, per kind
        pa.field("safety_reason", _STR),
    ),
    "perplexity": (
        pa.field("perplexity", _F32),
        pa.field("ppl_bucket", _STR),  # head | middle | tail | none (no model for the language)
    ),
    "dedup": (
        pa.field("exact_hash", _STR),
        pa.field("dup_cluster", pa.int64()),
        pa.field("dup_keep", pa.bool_()),
        pa.field("dup_cluster_size", _I32),
    ),
}
"""Stage name -> the columns it provides, in order. Stages declare `provides` from here."""

STAGE_ORDER: tuple[str, ...] = tuple(STAGE_COLUMNS)


def reason_column(stage: str) -> str:
    return f"{stage}_reason"


def stage_fields(stage: str) -> tuple[pa.Field, ...]:
    try:
        return STAGE_COLUMNS[stage]
    except KeyError:
        raise SchemaError(
            f"unknown stage {stage!r}; known stages: {', '.join(STAGE_ORDER)}"
        ) from None


def schema_for(stages: Iterable[str]) -> pa.Schema:
    """The schema of a table after the given stages have run (base columns first)."""
    fields = list(BASE_FIELDS)
    for stage in stages:
        fields.extend(stage_fields(stage))
    return pa.schema(fields, metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()})


def split_for(doc_id: str, eval_fraction: float = EVAL_FRACTION) -> str:
    """Stable split tag from a hash of the id: the same id is `eval` in every run and version."""
    digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    unit = int.from_bytes(digest, "big") / 2**64
    return "eval" if unit < eval_fraction else "train"


def validate(table: pa.Table | pa.Schema, stages: Iterable[str] = ()) -> None:
    """Refuse a table whose columns or types differ from base + the given stages' columns.

    Columns beyond those are refused too, so a typo in a stage's output is caught at its source.
    """
    schema = table if isinstance(table, pa.Schema) else table.schema
    expected = schema_for(stages)
    present = {f.name: f for f in schema}
    for field in expected:
        got = present.get(field.name)
        if got is None:
            raise SchemaError(
                f"column {field.name!r} is missing; a table after these stages needs "
                f"{', '.join(expected.names)}"
            )
        if not got.type.equals(field.type):
            raise SchemaError(f"column {field.name!r} has type {got.type}, expected {field.type}")
    extra = [name for name in schema.names if name not in expected.names]
    if extra:
        raise SchemaError(
            f"unexpected column(s) {', '.join(extra)}; register them in "
            "pretrain.schema.STAGE_COLUMNS under the stage that adds them"
        )
    if isinstance(table, pa.Table):
        for name in ("id", "split"):
            if table.column(name).null_count:
                raise SchemaError(f"column {name!r} has {table.column(name).null_count} null(s)")


def conform(table: pa.Table, stages: Iterable[str]) -> pa.Table:
    """Reorder and cast `table` to the schema of `stages` (same column names required)."""
    expected = schema_for(stages)
    missing = [n for n in expected.names if n not in table.column_names]
    if missing:
        raise SchemaError(f"cannot conform table: column(s) {', '.join(missing)} missing")
    return table.select(expected.names).cast(expected)
