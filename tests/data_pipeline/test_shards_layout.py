"""The shards layout other tools load: pyarrow.dataset, duckdb, polars and Hugging Face datasets,
pointed at a real `pretrain data run` output (or its root), see exactly the kept documents our
reader sees; the rejects, the ledger and the global stages' map side (kept after the run as a
resume cache) stay out of their globs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as pads
import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.runner import run_pipeline
from data_pipeline.stages.safety import CATEGORIES_TYPE, PII_COUNTS_TYPE
from pretrain import shards_layout as layout
from pretrain.nested import META_TYPE
from tokenizer.shards import read_columns, require_shards

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def artifact(ray_local, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("layout") / "shards"
    config = {
        "inputs": [str(DATA)],
        "output": str(out),
        "shard_rows": 4,
        "batch_rows": 3,
        "eval_fraction": 0.3,  # held-out documents for the card's eval config
        "stages": {"extract": {}, "langid": {}, "safety": {"url_blocklist": False}, "dedup": {}},
    }
    run_pipeline(
        PipelineConfig.model_validate({**config, "ray": {"timeout_s": 200}}), progress=False
    )
    return out


def _ours(directory: Path) -> Counter[str]:
    _, shards = require_shards(directory)
    return Counter(
        i for path in shards for t in read_columns(path, ["id"]) for i in t["id"].to_pylist()
    )


def _rejected(directory: Path) -> set[str]:
    files = sorted((directory / layout.REJECTS_DIR).glob(f"*{layout.REJECTS_SUFFIX}"))
    return {
        row[0]
        for row in duckdb.sql(f"select id from read_parquet({[str(f) for f in files]})").fetchall()
    }


def test_the_run_keeps_some_and_rejects_some(artifact: Path) -> None:
    ledger = json.loads((artifact / layout.LEDGER).read_text())
    kept, rejected = _ours(artifact), _rejected(artifact)
    assert sum(kept.values()) == ledger["documents_kept"] > 0 and max(kept.values()) == 1
    assert len(rejected) == ledger["documents_dropped"] > 0 and not rejected & set(kept)
    assert all(p.parent.name == layout.DATA_DIR for p in artifact.glob("**/*.parquet"))
    # the map side is there (keep_global_parts), as Parquet, and the readers below must skip it
    assert list((artifact / layout.GLOBAL_MAP_DIR / "dedup").glob(f"*.rows{layout.OTHER_PARQUET}"))


@pytest.mark.parametrize("pattern", [layout.DATA_GLOB, "**/*.parquet"])
def test_duckdb_glob_reads_exactly_the_kept_documents(artifact: Path, pattern: str) -> None:
    rows = duckdb.sql(f"select id from read_parquet('{artifact}/{pattern}')").fetchall()
    assert Counter(r[0] for r in rows) == _ours(artifact)


@pytest.mark.parametrize("pattern", [layout.DATA_GLOB, "**/*.parquet"])
def test_polars_glob_reads_exactly_the_kept_documents(artifact: Path, pattern: str) -> None:
    ids = pl.scan_parquet(f"{artifact}/{pattern}").select("id").collect()["id"].to_list()
    assert Counter(ids) == _ours(artifact)


def test_pyarrow_dataset_reads_exactly_the_kept_documents(artifact: Path) -> None:
    """From the root too: pyarrow skips `.parts/` and `_rejects/` (names starting with `.`/`_`)."""
    for dataset in (
        pads.dataset(artifact / layout.DATA_DIR, format="parquet"),
        pads.dataset(artifact, exclude_invalid_files=True),
    ):
        table = dataset.to_table(columns=["id"])
        assert Counter(table["id"].to_pylist()) == _ours(artifact)


def test_pyarrow_dataset_of_the_root_alone_refuses_the_card(artifact: Path) -> None:
    """The documented limit: without exclude_invalid_files pyarrow reads README.md (the dataset
    card) as Parquet and stops; it never returns other rows."""
    with pytest.raises(Exception, match="README.md"):
        pads.dataset(artifact).to_table(columns=["id"])


def test_hf_datasets_loads_exactly_the_kept_documents(
    artifact: Path, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets

    by_glob = datasets.load_dataset(
        "parquet", data_files=f"{artifact}/{layout.DATA_GLOB}", cache_dir=str(tmp_path / "hf2")
    )
    assert list(by_glob) == ["train"] and Counter(by_glob["train"]["id"]) == _ours(artifact)
    # the card: training documents by default, the held-out ones as the eval config (issue 33.1)
    held_out = set(
        duckdb.sql(
            f"select id from read_parquet('{artifact}/{layout.DATA_GLOB}') where split = 'eval'"
        ).fetchall()
    )
    held_out = {row[0] for row in held_out}
    train = datasets.load_dataset(str(artifact), cache_dir=str(tmp_path / "hf"))
    evals = datasets.load_dataset(str(artifact), "eval", cache_dir=str(tmp_path / "hf"))
    assert list(train) == ["train"] and list(evals) == ["eval"] and held_out
    assert set(evals["eval"]["id"]) == held_out
    assert Counter(train["train"]["id"]) + Counter(evals["eval"]["id"]) == _ours(artifact)
    assert not set(train["train"]["id"]) & held_out


def test_nested_tags_are_nested_types_in_each_tool(artifact: Path, tmp_path, monkeypatch) -> None:
    data = pads.dataset(artifact / layout.DATA_DIR, format="parquet").to_table()
    assert data.schema.field("meta").type == META_TYPE
    assert data.schema.field("pii_counts").type == PII_COUNTS_TYPE
    assert data.schema.field("unsafe_categories").type == CATEGORIES_TYPE
    by_id = {r["id"]: r for r in data.to_pylist()}
    assert any(r["meta"] for r in by_id.values())  # code.parquet's extra columns
    glob = f"{artifact}/{layout.DATA_GLOB}"
    rows = duckdb.sql(
        "select id, pii_counts.email, len(unsafe_categories), meta, "
        "list_filter(meta, lambda e: e.key = 'programming_language')[1].str "
        f"from read_parquet('{glob}')"
    ).fetchall()
    languages = set()
    for doc_id, emails, categories, meta, language in rows:
        row = by_id[doc_id]
        assert emails == row["pii_counts"]["email"]
        assert categories == len(row["unsafe_categories"])
        assert meta == row["meta"]
        expected = [e["str"] for e in row["meta"] or () if e["key"] == "programming_language"]
        assert [language] == (expected or [None])
        languages.add(language)
    assert "python" in languages  # the docs' recipe reads a key
    frame = pl.read_parquet(glob)
    assert isinstance(frame.schema["pii_counts"], pl.Struct)
    assert isinstance(frame.schema["unsafe_categories"], pl.List)
    assert frame.schema["meta"] == pl.List(
        pl.Struct(
            {
                "key": pl.String,
                "str": pl.String,
                "int": pl.Int64,
                "float": pl.Float64,
                "bool": pl.Boolean,
                "json": pl.String,
            }
        )
    )
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets

    loaded = datasets.load_dataset(str(artifact), cache_dir=str(tmp_path / "hf"))["train"]
    first = loaded[0]  # a training document (the card's default config)
    assert first["pii_counts"] == by_id[first["id"]]["pii_counts"]
    assert first["meta"] == by_id[first["id"]]["meta"]
