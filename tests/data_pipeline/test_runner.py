"""The data job on the shared local Ray: shards, ledger, manifest, resume, byte-identical re-runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.runner import run_pipeline
from data_pipeline.stages.registry import schema_for
from pretrain.errors import ConfigError
from pretrain.manifest import require

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


def _config(out: Path, **overrides) -> PipelineConfig:
    data = {
        "inputs": [str(DATA)],
        "output": str(out),
        "shard_rows": 4,
        "batch_rows": 3,
        "ray": {"timeout_s": 200},
        **overrides,
    }
    return PipelineConfig.model_validate(data)


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*.parquet"))
        if ".parts" not in p.parts
    }


@pytest.fixture(scope="module")
def first_run(ray_local, tmp_path_factory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("run") / "shards"
    return out, run_pipeline(_config(out), progress=False)


def test_shards_ledger_and_manifest(first_run) -> None:
    out, result = first_run
    # docs-00003 holds only a record without text: its rows are all rejects, so no shard.
    assert result.shards == [
        "code-00000.parquet",
        "docs-00000.parquet",
        "docs-00001.parquet",
        "docs-00002.parquet",
        "pages-00000.parquet",
        "pages-00001.parquet",
    ]
    assert result.parts == 7 and (out / "_rejects" / "docs-00003.pq").is_file()
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["conservation"]["balanced"]
    assert (ledger["documents_in"], ledger["documents_kept"], ledger["documents_dropped"]) == (
        23,
        17,
        6,
    )
    extract = ledger["stages"][0]
    assert {r: v["documents"] for r, v in extract["reasons"].items()} == {
        "empty": 2,
        "malformed_json": 1,
        "missing_text": 1,
        "not_text": 1,
        "undecodable": 1,
    }
    assert ledger["languages"]["zh"]["documents"] == 5 and ledger["languages"]["en"]["documents"]
    manifest = require(out, kind="shards")
    assert manifest["counts"]["documents_kept"] == 17
    assert [s["name"] for s in manifest["stages"]] == ["extract", "langid"]
    assert set(manifest["models"]) == {"langid.model"}


def test_shards_have_the_schema_tags_and_zstd(first_run) -> None:
    out, _ = first_run
    tables = [pq.read_table(p) for p in sorted((out / "data").glob("*.parquet"))]
    expected = schema_for(["extract", "langid"])
    for table in tables:
        assert table.schema.equals(expected, check_metadata=False)
        assert table.column("extract_reason").null_count == table.num_rows
    meta = pq.ParquetFile(out / "data" / "docs-00000.parquet").metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    rows = [r for t in tables for r in t.to_pylist()]
    gbk = next(r for r in rows if r["url"] == "https://gbk.example.cn/page")
    assert "GBK" in gbk["text"] and gbk["lang"] == "zh"
    nul = next(r for r in rows if r["id"] == "docs/nul-bytes")  # ids are namespaced by input
    assert "\x00" not in nul["text"] and "a NUL byte in" in " ".join(nul["text"].split())
    assert nul["control_chars"] == 1


def test_rejects_area_names_each_reason(first_run) -> None:
    out, _ = first_run
    rejects = [
        r for p in sorted((out / "_rejects").glob("*.pq")) for r in pq.read_table(p).to_pylist()
    ]
    assert sorted(r["reject_reason"] for r in rejects) == [
        "extract:empty",
        "extract:empty",
        "extract:malformed_json",
        "extract:missing_text",
        "extract:not_text",
        "extract:undecodable",
    ]


def test_rerun_reuses_finished_shards_byte_identical(first_run) -> None:
    out, _ = first_run
    before = _files(out)
    again = run_pipeline(_config(out), progress=False)
    assert again.reused_parts == 7 and _files(out) == before
    # Lose two shards as if the driver died before they were written: only they are recomputed.
    for shard in ("docs-00002", "pages-00001"):
        (out / "data" / f"{shard}.parquet").unlink()
        (out / ".parts" / f"{shard}.json").unlink()
    (out / "_rejects" / "pages-00001.pq").unlink(missing_ok=True)
    resumed = run_pipeline(_config(out), progress=False)
    assert resumed.reused_parts == 5
    assert _files(out) == before
    require(out, kind="shards")


def test_changed_config_is_refused_unless_overwrite(first_run, tmp_path) -> None:
    out, _ = first_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    with pytest.raises(ConfigError, match="overwrite=true"):
        run_pipeline(_config(copy, shard_rows=5), progress=False)
    result = run_pipeline(_config(copy, shard_rows=50, overwrite=True), progress=False)
    assert result.shards == ["code-00000.parquet", "docs-00000.parquet", "pages-00000.parquet"]
    assert result.ledger["documents_kept"] == 17


def test_demo_config_runs_model_stages_only_with_their_models(tmp_path) -> None:
    from tests.sample_models import demo_config

    without = demo_config(tmp_path / "raw", tmp_path / "out", {})
    assert without.stages.extract == {} and without.stages.langid == {}
    assert without.stages.domain is None and without.stages.perplexity is None
    models = {"domain": tmp_path / "d", "quality": tmp_path / "q", "lm": tmp_path / "lm"}
    with_models = demo_config(tmp_path / "raw", tmp_path / "out", models)
    if with_models.stages.domain is not None:  # present once the classify stage is built
        assert with_models.stages.domain == {"model": str(tmp_path / "d")}
    if with_models.stages.perplexity is not None:
        assert with_models.stages.perplexity == {"model": str(tmp_path / "lm")}


def _published(out: Path) -> dict[str, tuple[int, int, bytes]]:
    """Shards, rejects and the ledger: path -> (inode, mtime_ns, bytes)."""
    paths = [*sorted((out / "data").glob("*")), *sorted((out / "_rejects").glob("*"))]
    paths += [out / "ledger.json"] if (out / "ledger.json").is_file() else []
    return {
        p.relative_to(out).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
        for p in paths
    }


def _killed_in_the_merge(out: Path, shards: tuple[str, ...]) -> None:
    """What a driver killed while it merges leaves: `shards` not written, no ledger, no manifest."""
    for shard in shards:
        for name in (f"data/{shard}.parquet", f"_rejects/{shard}.pq", f".parts/{shard}.json"):
            (out / name).unlink(missing_ok=True)
    (out / "ledger.json").unlink()
    (out / "manifest.json").unlink()


@pytest.mark.slow
@pytest.mark.timeout(900)  # four dedup runs: a hang guard, several minutes on a loaded machine
def test_a_resume_with_a_global_stage_merges_only_the_parts_not_published(
    ray_local, tmp_path
) -> None:
    """Killed in the merge of a job with dedup: the resume keeps every shard already merged (its
    files untouched) and merges only the parts left, byte-identical to an uninterrupted run. When
    the global stage's input changed instead (an input edited), duplicate clusters may change:
    no shard is kept, and the output equals a fresh run's."""
    stages = {"extract": {}, "langid": {}, "dedup": {}}
    inputs = tmp_path / "in"
    shutil.copytree(DATA, inputs)
    out = tmp_path / "dedup"
    config = _config(out, stages=stages, inputs=[str(inputs)])
    first = run_pipeline(config, progress=False)
    expected = {name: data for name, (_, _, data) in _published(out).items()}
    _killed_in_the_merge(out, ("docs-00001", "docs-00003"))  # docs-00003 holds only rejects
    left = _published(out)
    resumed = run_pipeline(config, progress=False)
    assert resumed.reused_parts == first.parts - 2
    now = _published(out)
    assert {name: now.get(name) for name in left} == left  # published: not written again
    assert {name: data for name, (_, _, data) in now.items()} == expected
    tables = [pq.read_table(out / "data" / name) for name in first.shards]
    assert all("dup_keep" in t.column_names for t in tables)

    with (inputs / "docs.jsonl").open("a") as handle:  # one more document: new global input
        handle.write(json.dumps({"id": "late", "text": "A late document, added."}) + "\n")
    _killed_in_the_merge(out, ("code-00000",))
    changed = run_pipeline(config, progress=False)
    run_pipeline(_config(tmp_path / "fresh", stages=stages, inputs=[str(inputs)]), progress=False)
    assert changed.reused_parts == 0
    assert {n: d for n, (_, _, d) in _published(out).items()} == {
        n: d for n, (_, _, d) in _published(tmp_path / "fresh").items()
    }
