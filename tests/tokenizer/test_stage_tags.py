"""A tag is declared once, by the stage that appends it (`Stage.tags`), and every reader derives
it from there: the shards' schema, the shard reader's typed nulls where the stage did not run, the
encoder's sidecars (copied and typed), the sidecars as mixtures read them, a recipe's select
clause on it (typed by its declaration) through `pretrain mixture build`. The stage here is a
plugin installed in a temporary directory: no project file names its tag."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from data_pipeline.stages import registry as stage_registry
from mixtures.recipe import Recipe, recipe_sha256
from mixtures.selection import load_sidecars
from pretrain import shards_layout as layout
from pretrain.artifacts import encoded as encoded_kind
from pretrain.artifacts import shards as shards_artifact
from pretrain.artifacts.base import write_artifact
from pretrain.manifest import load_manifest
from pretrain_app.cli import main
from tests.data_pipeline.test_stage_plugin import _plugin
from tokenizer.encode import encode, sidecar_schema
from tokenizer.shards import read_columns, require_shards

pytestmark = pytest.mark.timeout(300)


@pytest.fixture()
def plugin_tag(tmp_path, monkeypatch):
    """The registry as a process with the toy plugin installed sees it (`toy_chars`, int32)."""
    monkeypatch.syspath_prepend(str(_plugin(tmp_path / "site")))
    stage_registry.registry.cache_clear()
    yield "toy_chars"
    monkeypatch.undo()
    sys.modules.pop("toy_stages", None)
    stage_registry.registry.cache_clear()


def _with_tag(shards_dir: Path, root: Path) -> Path:
    """The synthetic shards with the plugin's column appended (as a run with the stage writes)."""
    manifest, paths = require_shards(shards_dir)
    (root / layout.DATA_DIR).mkdir(parents=True)
    for path in paths:
        table = pq.read_table(path)
        chars = pc.utf8_length(pc.fill_null(table.column("text"), "")).cast(pa.int32())
        table = table.append_column(pa.field("toy_chars", pa.int32()), chars)
        pq.write_table(table, root / layout.DATA_DIR / path.name)
    fields = shards_artifact.ShardsFields(stages=manifest["stages"])
    write_artifact(root, fields, config={"test": "toy tag"}, counts={})
    return root


def _mixture_on_the_tag(tokenizer_dir: Path, encoded: Path, tmp_path: Path, least: int) -> Path:
    """`pretrain mixture build` with one component selecting `toy_chars >= least`."""
    select = {"toy_chars": {"min": least}}
    config = {
        "recipe": {
            "components": [{"name": "long", "select": select, "weight": 1, "max_epochs": 50}]
        },
        "build": {
            "encoded": str(encoded),
            "tokenizer": str(tokenizer_dir),
            "total_tokens": 4 * 32 * 5,
            "seq_length": 32,
            "global_batch": 4,
        },
        "out": str(tmp_path / "mix"),
    }
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["mixture", "build", str(tmp_path / "mix.yaml")]) == 0
    return tmp_path / "mix"


@pytest.mark.slow  # ~45 s under load: megatron-core's first import, a real encode
def test_a_tag_declared_once_by_a_stage_reaches_every_reader(
    plugin_tag, tokenizer_dir: Path, shards_dir: Path, tmp_path: Path
) -> None:
    schema = stage_registry.schema_for(["extract", "toylen"])
    assert schema.field("toy_chars").type == pa.int32()
    assert pa.field("toy_chars", pa.int32()) in stage_registry.tag_fields()

    without = require_shards(shards_dir)[1][0]  # written before the stage existed
    (nulls,) = list(read_columns(without, ["id", "toy_chars"], batch_size=10_000))
    assert nulls.schema.field("toy_chars").type == pa.int32()
    assert nulls.column("toy_chars").null_count == nulls.num_rows > 0

    sidecar = sidecar_schema()
    assert sidecar.field("toy_chars").type == pa.int32()  # in pipeline order (dfac696)
    tagged = _with_tag(shards_dir, tmp_path / "tagged")
    encode(tokenizer_dir, tagged, tmp_path / "enc", backend="inline", min_prefix_documents=200)
    docs = pa.concat_tables(
        pq.read_table(p) for p in sorted((tmp_path / "enc").glob("*.docs.parquet"))
    )
    assert docs.schema.field("toy_chars").type == pa.int32()
    source = pa.concat_tables(pq.read_table(p) for p in require_shards(tagged)[1])
    # every document once, with its tag (training and held-out documents sit in separate prefixes)
    want_tags = dict(zip(*source.select(["id", "toy_chars"]).to_pydict().values(), strict=True))
    assert docs.num_rows == source.num_rows
    assert dict(zip(*docs.select(["id", "toy_chars"]).to_pydict().values(), strict=True)) == (
        want_tags
    )
    assert np.all(docs.column("toy_chars").to_numpy() >= 0)
    prefixes = encoded_kind.open(tmp_path / "enc").fields.prefixes
    sidecars = load_sidecars(tmp_path / "enc", prefixes)  # what mixtures select over
    assert sidecars.table.schema.field("toy_chars").type == pa.int64()  # widened, as counts
    by_id = sidecars.table.select(["id", "toy_chars"]).to_pydict().values()
    assert dict(zip(*by_id, strict=True)) == want_tags
    least = int(np.median(source.column("toy_chars").to_numpy()))
    mix = _mixture_on_the_tag(tokenizer_dir, tmp_path / "enc", tmp_path, least)
    chosen = np.load(mix / "components" / "long.npy")
    ids = sidecars.table.column("id").to_pylist()
    starts = np.cumsum([0, *(np.bincount(sidecars.prefix_of_row)[:-1])])
    got = {ids[starts[p] + d] for p, d in zip(chosen["prefix"], chosen["doc"], strict=True)}
    want = {
        row["id"]
        for row in source.select(["id", "toy_chars", "split"]).to_pylist()
        if row["toy_chars"] >= least and row["split"] != "eval"
    }
    assert got == want and 0 < len(want) < source.num_rows
    recipe = Recipe.model_validate(load_manifest(mix)["config"]["recipe"])
    assert load_manifest(mix)["recipe_sha256"] == recipe_sha256(recipe)
    older = tmp_path / "older"  # a sidecar encoded before the stage existed: typed nulls
    older.mkdir()
    for stem in prefixes:
        name = f"{stem}.docs.parquet"
        pq.write_table(pq.read_table(tmp_path / "enc" / name).drop(["toy_chars"]), older / name)
    column = load_sidecars(older, prefixes).table.column("toy_chars")
    assert column.type == pa.int64() and column.null_count == len(column)
