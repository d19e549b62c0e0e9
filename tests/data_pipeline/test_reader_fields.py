"""The fields real corpora use (issue 33 item 4): each corpus's record shape, read with the
settings docs/data.md gives for it, puts its text, id and URL in the right columns, and a
blocklisted URL under a nested path (Dolma's and datatrove's `metadata.url`, the Pile's and
RedPajama v1's `meta.url`) is caught by the safety stage's URL blocklist. A corpus read with the
wrong text field is a one-line error naming the fields it has, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.stages.safety import SafetyConfig, SafetyStage
from pretrain.nested import META_SLOTS, META_TYPE, meta_value
from tests.data_pipeline.readall import read_all
from tests.data_pipeline.test_trust_sizes import prose

BLOCKED = "http://www.blocked.test/page"
CLEAN = "http://example.org/page"


def _dolma(i: int, url: str) -> dict:
    metadata = {"url": url, "warc_date": "2019-04-18"}
    return {"id": f"d{i}", "text": prose(i), "source": "common-crawl", "metadata": metadata}


def _datatrove(i: int, url: str) -> dict:
    return {"text": prose(i), "id": f"d{i}", "media": [], "metadata": {"url": url, "dump": "CC"}}


def _fineweb(i: int, url: str) -> dict:
    return {"text": prose(i), "id": f"d{i}", "url": url, "dump": "CC-MAIN-2024-10"}


FINEWEB_METADATA = {
    "language_score": 0.93,
    "token_count": 812,
    "dump": "CC-MAIN-2024-10",
    "nested": {"a": 1},
}


def _fineweb_jsonl(i: int) -> dict:
    """FineWeb as datatrove's JsonlWriter writes it: the scores under `metadata`."""
    return {"text": prose(i), "id": f"f{i}", "metadata": FINEWEB_METADATA}


def _pile(i: int, url: str) -> dict:
    return {"text": prose(i), "meta": {"pile_set_name": "Pile-CC", "url": url}}


def _redpajama_v1(i: int, url: str) -> dict:
    return {"text": prose(i), "meta": {"url": url, "language": "en", "source": "c4"}}


def _redpajama_v2(i: int, url: str) -> dict:
    return {"raw_content": prose(i), "digest": f"sha1:d{i}", "url": url, "source_domain": "b"}


# corpus -> (record shape, the settings docs/data.md's table gives, record 0's id, its source);
# the Pile and RedPajama v1 carry no id: a record is named by its line
PRESETS = {
    "dolma": (_dolma, {"url_field": "metadata.url"}, "d0", "common-crawl"),
    "datatrove": (_datatrove, {"url_field": "metadata.url"}, "d0", None),
    "fineweb": (_fineweb, {}, "d0", None),
    "pile": (_pile, {"url_field": "meta.url"}, "pile.jsonl:1", None),
    "redpajama-v1": (
        _redpajama_v1,
        {"url_field": "meta.url", "source_field": "meta.source"},
        "redpajama-v1.jsonl:1",
        "c4",
    ),
    "redpajama-v2": (
        _redpajama_v2,
        {"text_field": "raw_content", "id_field": "digest"},
        "sha1:d0",
        None,
    ),
}


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _meta(entries: list[dict] | None) -> dict:
    return {e["key"]: meta_value(e) for e in entries or []}


@pytest.mark.parametrize("corpus", sorted(PRESETS))
def test_each_corpus_shape_with_its_settings(tmp_path: Path, corpus: str) -> None:
    shape, settings, first_id, source = PRESETS[corpus]
    path = _write(tmp_path / f"{corpus}.jsonl", [shape(0, BLOCKED), shape(1, CLEAN)])
    config = PipelineConfig.model_validate({"inputs": [str(path)], "output": "o", **settings})
    table, _ = read_all(path, fields=config.fields())
    assert table is not None and table.column("_read_reason").null_count == 2
    assert table.column("text").to_pylist() == [prose(0), prose(1)]
    assert table.column("url").to_pylist() == [BLOCKED, CLEAN]
    assert table.column("id")[0].as_py() == f"{corpus}/{first_id}"
    assert table.column("source")[0].as_py() == (source or f"jsonl:{corpus}.jsonl")
    # what a field took is not repeated in meta, at any depth; the rest of the record is
    meta = _meta(table.column("meta")[0].as_py())
    assert BLOCKED not in json.dumps(meta) and prose(0) not in json.dumps(meta)
    assert (
        meta and first_id not in meta.values() and (source is None or source not in meta.values())
    )
    safety = SafetyStage(
        SafetyConfig(
            url_blocklist=False,
            extra_blocked_domains=("blocked.test",),
            unsafe_words=False,
            redact_pii=False,
        )
    )
    tagged = safety(table.drop_columns([c for c in table.column_names if c.startswith("_")]))
    assert tagged.column("url_blocked").to_pylist() == [True, False]
    assert tagged.column("safety_reason").to_pylist() == ["url_blocklist", None]


def test_without_the_url_field_a_nested_url_is_not_read(tmp_path: Path) -> None:
    """The default `url_field: url` reads no nested URL: the setting is what catches it."""
    path = _write(tmp_path / "dolma.jsonl", [_dolma(0, BLOCKED)])
    table, _ = read_all(path)
    assert table is not None and table.column("url").to_pylist() == [None]
    meta = _meta(table.column("meta")[0].as_py())
    assert meta == {"metadata.url": BLOCKED, "metadata.warc_date": "2019-04-18"}


def test_consumed_fields_leave_meta_and_the_record_is_not_changed(tmp_path: Path) -> None:
    record = {"text": prose(3), "metadata": {"url": CLEAN}, "meta": {"doc": "x", "url": CLEAN}}
    path = _write(tmp_path / "mix.jsonl", [record])
    table, _ = read_all(
        path,
        fields=PipelineConfig(
            inputs=("x",), output="o", url_field="meta.url", id_field="meta.doc"
        ).fields(),
    )
    assert table is not None and table.column("id").to_pylist() == ["mix/x"]
    # what `meta` gave is gone, `metadata` stays; a key is the field's dotted path
    assert _meta(table.column("meta")[0].as_py()) == {"metadata.url": CLEAN}


def test_nested_url_in_a_parquet_struct(tmp_path: Path) -> None:
    """A Parquet `metadata` struct column is reached by the same dotted name."""
    rows = [_dolma(0, BLOCKED), _dolma(1, CLEAN)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "dolma.parquet")
    fields = PipelineConfig(inputs=("x",), output="o", url_field="metadata.url").fields()
    table, _ = read_all(tmp_path / "dolma.parquet", fields=fields)
    assert table is not None and table.column("url").to_pylist() == [BLOCKED, CLEAN]
    assert _meta(table.column("meta")[1].as_py()) == {"metadata.warc_date": "2019-04-18"}


def test_metadata_keeps_its_types_under_dotted_keys(tmp_path: Path) -> None:
    """Numbers stay numbers (FineWeb's `language_score` was the string '0.93'), nested objects
    are dotted keys (they were one JSON string); lists and integers past int64 are JSON text."""
    metadata = {**FINEWEB_METADATA, "ok": True, "none": None, "tags": ["a", 1], "big": 2**70}
    path = _write(tmp_path / "fw.jsonl", [{"text": prose(0), "metadata": metadata}])
    table, _ = read_all(path)
    assert table is not None and table.schema.field("meta").type == META_TYPE
    entries = {e["key"]: e for e in table.column("meta")[0].as_py()}
    assert list(entries) == sorted(entries)
    assert {key: meta_value(e) for key, e in entries.items()} == {
        "metadata.big": str(2**70),
        "metadata.dump": "CC-MAIN-2024-10",
        "metadata.language_score": 0.93,
        "metadata.nested.a": 1,
        "metadata.none": None,
        "metadata.ok": True,
        "metadata.tags": '["a", 1]',
        "metadata.token_count": 812,
    }
    slots = {key: [s for s in META_SLOTS if e[s] is not None] for key, e in entries.items()}
    assert slots["metadata.language_score"] == ["float"] and slots["metadata.token_count"] == [
        "int"
    ]
    assert slots["metadata.ok"] == ["bool"] and slots["metadata.tags"] == ["json"]
    assert slots["metadata.none"] == [] and slots["metadata.dump"] == ["str"]


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_url_field_and_typed_metadata_reach_the_data_job(ray_local, tmp_path: Path) -> None:
    """`url_field` from the config reaches the readers on Ray's workers: the shards' `url` and
    the safety stage's tag; a FineWeb record's metadata is typed in the shards duckdb reads."""
    import duckdb

    from data_pipeline.runner import run_pipeline

    (tmp_path / "in").mkdir()
    source = _write(tmp_path / "in" / "dolma.jsonl", [_dolma(0, BLOCKED), _dolma(1, CLEAN)])
    fineweb = _write(tmp_path / "in" / "fineweb.jsonl", [_fineweb_jsonl(2)])
    safety = {"url_blocklist": False, "extra_blocked_domains": ["blocked.test"]}
    config = PipelineConfig.model_validate(
        {
            "inputs": [str(source), str(fineweb)],
            "output": str(tmp_path / "out"),
            "url_field": "metadata.url",
            "stages": {"extract": {}, "safety": {**safety, "unsafe_words": False}},
            "ray": {"timeout_s": 250},
        }
    )
    run_pipeline(config, progress=False)
    table = pq.read_table(tmp_path / "out" / "data").sort_by("id")
    assert table.column("id").to_pylist() == ["dolma/d0", "dolma/d1", "fineweb/f2"]
    assert table.column("url").to_pylist()[:2] == [BLOCKED, CLEAN]
    assert table.column("url_blocked").to_pylist()[:2] == [True, False]
    row = duckdb.sql(
        "select list_filter(meta, lambda e: e.key = 'metadata.language_score')[1].float, "
        "list_filter(meta, lambda e: e.key = 'metadata.token_count')[1].int, "
        "list_filter(meta, lambda e: e.key = 'metadata.nested.a')[1].int, "
        "list_filter(meta, lambda e: e.key = 'metadata.dump')[1].str "
        f"from read_parquet('{tmp_path}/out/data/*.parquet') where id = 'fineweb/f2'"
    ).fetchall()
    assert row == [(0.93, 812, 1, "CC-MAIN-2024-10")]
