"""Distributed dedup on a real local Ray (2 CPUs): same tags as in-process, for any partitioning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from data_pipeline.dedup.config import DedupConfig
from data_pipeline.stages.dedup import DedupStage
from pretrain.manifest import load_manifest
from tests.data_pipeline.test_dedup import load_fixture

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]
TAGS = ["id", "exact_hash", "dup_cluster", "dup_keep", "dup_cluster_size"]


def _run(ray, blocks: list[pa.Table], config: DedupConfig) -> tuple[pa.Table, DedupStage]:
    stage = DedupStage(config)
    out = stage.apply(ray.data.from_arrow(blocks))
    return pa.concat_tables(ray.get(out.to_arrow_refs())), stage


def test_distributed_equals_in_process_for_any_partitioning(ray_local) -> None:
    table, _ = load_fixture()
    local_stage = DedupStage()
    local = local_stage.apply_table(table)
    splits = {2: [table.slice(0, 10), table.slice(10, 7), table.slice(17)], 5: [table]}
    for partitions, blocks in splits.items():
        got, stage = _run(ray_local, blocks, DedupConfig(num_partitions=partitions))
        assert got.equals(local)  # same rows, same order, same tags
        assert stage.stats.dropped == local_stage.stats.dropped == 9
        assert stage.stats.candidate_pairs == local_stage.stats.candidate_pairs
        assert (stage.stats.empty, stage.stats.tiny) == (2, 3)
        assert all(v > 0 for v in stage.stats.extra["worker_peak_rss_mb_by_step"].values())


def test_distributed_incremental_index_round_trip(ray_local, tmp_path: Path) -> None:
    table, _ = load_fixture()
    old, new = table.slice(0, 12), table.slice(12)
    saved = DedupConfig(num_partitions=2, index={"save_to": str(tmp_path / "idx")})
    _run(ray_local, [old.slice(0, 6), old.slice(6)], saved)
    assert load_manifest(tmp_path / "idx")["counts"]["documents"] == 12

    against = DedupConfig(num_partitions=3, index={"against": str(tmp_path / "idx")})
    got, stage = _run(ray_local, [new.slice(0, 9), new.slice(9)], against)
    expected = DedupStage(DedupConfig(index={"against": str(tmp_path / "idx")})).apply_table(new)
    assert got.select(TAGS).equals(expected.select(TAGS))
    keep = dict(zip(got.column("id").to_pylist(), got.column("dup_keep").to_pylist()))
    assert not keep["en-00-copy"] and not keep["en-01-near"]  # their originals are in the index
    assert stage.stats.index_matches == 6  # en-00..05 copies / near copies


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_distributed_determinism_on_a_larger_set_with_isolated_tasks(ray_local) -> None:
    rng = np.random.default_rng(7)
    vocab = np.array([f"w{i}" for i in range(3000)])
    bases = [" ".join(rng.choice(vocab, 120)) for _ in range(300)]
    texts, ids = [], []
    for i in range(1500):
        words = bases[i % 300].split()
        for pos in rng.choice(len(words), int(rng.integers(0, 6)), replace=False):
            words[pos] = f"edit{i}"
        texts.append(" ".join(words))
        ids.append(f"doc-{rng.integers(10**9):09d}-{i}")
    table = pa.table(
        {"id": ids, "text": texts, "quality_score": pa.array(rng.random(1500), pa.float32())}
    )
    local = DedupStage().apply_table(table)
    blocks = [table.slice(lo, 400) for lo in range(0, 1500, 400)]
    first, _ = _run(ray_local, blocks, DedupConfig(num_partitions=3, isolate_tasks=True))
    second, _ = _run(
        ray_local,
        [table.slice(0, 900), table.slice(900)],
        DedupConfig(num_partitions=7, batch_size=256),
    )
    assert first.equals(local) and second.equals(local)
    assert 0 < sum(local.column("dup_keep").to_pylist()) < 1500


def test_apply_returns_its_tags_lazily_in_input_order(ray_local) -> None:
    """`apply` returns a dataset whose tagged blocks are computed as the consumer reads them
    (before: every tagged block was computed and held in the object store, beside the input,
    when `apply` returned): not a MaterializedDataset, one block per slice, in the input's order
    with Ray Data's global `preserve_order` off (the dataset's own context turns it on); read twice (a consumer that re-executes it), the same bytes; a caller that keeps the
    input dataset still has it whole."""
    from ray.data import DataContext
    from ray.data.dataset import MaterializedDataset

    table, _ = load_fixture()
    expected = DedupStage().apply_table(table)
    big = pa.concat_tables([table.slice(0, 12)] * 40)  # a slow first slice: 480 rows
    blocks = [big, *(table.slice(lo, 1) for lo in range(12, table.num_rows))]
    expected_big = DedupStage().apply_table(pa.concat_tables(blocks))
    assert DataContext.get_current().execution_options.preserve_order is False
    stage = DedupStage(DedupConfig(num_partitions=2))
    dataset = ray_local.data.from_arrow(blocks)
    out = stage.apply(dataset)
    assert not isinstance(out, MaterializedDataset)
    assert stage.stats.extra["attach"] == "lazy"
    assert out.context.execution_options.preserve_order  # what keeps the order (not shown here
    # to break without it: Ray 2.60 kept this order with it off in 2 of 2 runs)
    streamed = [batch for batch in out.iter_batches(batch_size=None, batch_format="pyarrow")]
    assert len(streamed) == len(blocks)
    assert pa.concat_tables(streamed).equals(expected_big)
    assert pa.concat_tables(ray_local.get(out.to_arrow_refs())).equals(expected_big)
    assert dataset.count() == big.num_rows + table.num_rows - 12  # the caller's dataset is whole
    handed, _ = _run(
        ray_local,
        [table.slice(0, 10), table.slice(10, 7), table.slice(17)],
        DedupConfig(num_partitions=2),
    )
    assert handed.equals(expected)


def test_exchange_through_files_gives_the_same_tags_and_keeps_only_what_rebuilds_them(
    ray_local, tmp_path: Path
) -> None:
    """`exchange_dir`: the aggregate's pieces go through files, not the object store; the same
    bytes as in-process. After `apply` returns, only the tags' files are left, and they rebuild
    every tagged block the way Ray's lineage does when a block is lost with its node (its attach
    task run again on them); `close()` removes them. (They were deleted before `apply`
    returned: a lost block could not be rebuilt.)"""
    from data_pipeline.dedup import exchange, tasks

    table, _ = load_fixture()
    expected = DedupStage().apply_table(table)
    blocks = [table.slice(0, 10), table.slice(10, 7), table.slice(17)]
    before = tmp_path.stat().st_mtime_ns
    stage = DedupStage(DedupConfig(num_partitions=3), exchange_dir=str(tmp_path))
    out = stage.apply(ray_local.data.from_arrow(blocks))
    tagged = ray_local.get(out.to_arrow_refs())
    assert pa.concat_tables(tagged).equals(expected)
    assert stage.stats.dropped == 9
    assert "verify-u" in [step for step, _ in stage.timeline]
    assert tmp_path.stat().st_mtime_ns > before  # the run's folder was made there
    (run,) = tmp_path.iterdir()
    (step,) = run.iterdir()  # every other step's files are gone
    assert step.name.endswith("-keep")
    assert stage.stats.extra["plan"]["slices"] == len(blocks) == len(tagged)  # a slice a block
    for s, block in enumerate(blocks):
        gather = exchange.Gather(str(run), step.name, 0, 3, s % 3)
        assert tasks.attach(block, s, 0, block.num_rows, gather).equals(tagged[s])
    stage.close()
    assert list(tmp_path.iterdir()) == []


def test_the_lazy_join_back_is_counted_in_the_stage_cpu(ray_local) -> None:
    """The join back of `apply`'s lazy output runs in Ray Data's read tasks after `apply` has
    returned, so `stage.cost` cannot hold it; each read records its CPU and `attach_cost()`
    sums them (before: not counted anywhere, no such method): nothing before the output is
    read, one read per slice after, twice as many when read twice, none after `close()`."""
    table, _ = load_fixture()
    blocks = [table.slice(0, 10), table.slice(10, 7), table.slice(17)]
    stage = DedupStage(DedupConfig(num_partitions=2))
    out = stage.apply(ray_local.data.from_arrow(blocks))
    slices = stage.stats.extra["plan"]["slices"]
    assert stage.attach_cost()["reads"] == 0

    def read() -> pa.Table:  # streamed: each read executes the dataset again
        return pa.concat_tables(list(out.iter_batches(batch_size=None, batch_format="pyarrow")))

    first = read()
    once = stage.attach_cost()
    assert once["reads"] == slices == 3 and once["cpu_s"] > 0 and once["peak_rss_mb"] > 0
    assert read().equals(first)
    twice = stage.attach_cost()
    assert twice["reads"] == 2 * slices and twice["cpu_s"] > once["cpu_s"]
    stage.close()
    assert stage.attach_cost()["reads"] == 0
