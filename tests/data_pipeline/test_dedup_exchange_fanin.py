"""The two-level dedup exchange (data_pipeline.dedup.fanin): merged files give every consumer the
record batches the producers' files give it, in the same order; a retried merge rewrites the same
bytes; a changed merged (or producer) file is the ExchangeFileError naming it; an aggregate with
merge steps tags byte for byte as the one-level exchange, the object exchange and the in-process
dedup do."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from data_pipeline.dedup import exchange, fanin, tasks
from data_pipeline.dedup.config import DedupConfig
from tests.data_pipeline.test_dedup import load_fixture
from tests.data_pipeline.test_dedup_exchange import _compare, _pieces

PARTITIONS = 5


def _producers(folder: str, count: int, step: str = "0001-map") -> None:
    """`count` producers' files of one group: random rows cut into PARTITIONS pieces (some
    producers and some partitions empty), the schema of exchange's own test pieces."""
    rng = np.random.default_rng(count)
    base = pa.concat_tables([p for p in _pieces() if p.num_rows])
    for i in range(count):
        rows = 0 if i % 4 == 3 else int(rng.integers(1, 40))
        table = base.take(pa.array(rng.integers(0, base.num_rows, rows)))
        pieces = tasks.scatter(table, np.asarray(table.column("vertex")), PARTITIONS)
        exchange.write_pieces(exchange.piece_file(folder, step, i, 0), pieces)


def _merge_all(folder: str, count: int, width: int, step: str = "0001-map") -> list[list[int]]:
    return [
        fanin.merge(folder, step, 1, PARTITIONS, k, lo, min(lo + width, count))
        for k, lo in enumerate(range(0, count, width))
    ]


def _batches(gather: exchange.Gather) -> list[pa.RecordBatch]:
    return [b for t in gather.read() for b in t.to_batches()]


def test_merged_files_give_each_consumer_the_same_batches_in_the_same_order(tmp_path) -> None:
    folder = str(tmp_path)
    _producers(folder, 11)
    assert _merge_all(folder, 11, 4) == [[], [], []]  # 4 + 4 + 3 producers, all merged
    for q in range(PARTITIONS):
        one = exchange.Gather(folder, "0001-map", 0, 11, q)
        two = exchange.Gather(folder, "0001-map", 0, 11, q, fanin=4)
        assert len(two.read()) == 3 and len(one.read()) == 11
        assert _batches(two) == _batches(one) and _batches(one)
        assert tasks.concat([two]).equals(tasks.concat([one]))
        assert tasks.concat([two]).schema == tasks.concat([one]).schema


def test_a_retried_merge_rewrites_the_same_bytes(tmp_path) -> None:
    folder = str(tmp_path)
    _producers(folder, 9)
    _merge_all(folder, 9, 3)
    first = [exchange.merged_file(folder, "0001-map", k, 0).read_bytes() for k in range(3)]
    _merge_all(folder, 9, 3)  # a merge task run again (Ray retried it) over the same files
    assert [exchange.merged_file(folder, "0001-map", k, 0).read_bytes() for k in range(3)] == first
    assert not [
        p
        for p in Path(exchange.group_folder(folder, "0001-map", 0)).iterdir()
        if p.name.endswith(".tmp")
    ]


def test_a_changed_merged_file_is_an_error_naming_it(tmp_path) -> None:
    folder = str(tmp_path)
    _producers(folder, 6)
    _merge_all(folder, 6, 3)
    path = exchange.merged_file(folder, "0001-map", 1, 0)
    good = path.read_bytes()
    for pos in (len(good) // 2, len(good) - 9, 3):  # a batch, the trailer's count, the schema
        data = bytearray(good)
        data[pos] ^= 0x04
        path.write_bytes(bytes(data))
        refused = 0
        for q in range(PARTITIONS):
            gather = exchange.Gather(folder, "0001-map", 0, 6, q, fanin=3)
            try:
                gather.read()
            except exchange.ExchangeFileError as exc:
                assert str(exc).startswith(f"dedup exchange file {path} ")
                refused += 1
        assert refused, pos
    path.write_bytes(good)


def test_a_changed_producer_file_fails_its_merge_naming_it(tmp_path) -> None:
    folder = str(tmp_path)
    _producers(folder, 6)
    path = exchange.piece_file(folder, "0001-map", 4, 0)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(exchange.ExchangeFileError, match=f"dedup exchange file {path} has "):
        _merge_all(folder, 6, 3)
    path.write_bytes(bytes(data[:-1]))  # cut short
    with pytest.raises(exchange.ExchangeFileError, match="format marker"):
        fanin.merge(folder, "0001-map", 1, PARTITIONS, 1, 3, 6)


def test_producers_with_other_schemas_are_read_one_by_one(tmp_path) -> None:
    """An empty producer whose pieces have other column types (an empty slice of a block typed
    otherwise) leaves its merge group unmerged: the consumers read its producers' files."""
    folder = str(tmp_path)
    _producers(folder, 6)
    other = pa.table({"vertex": pa.array([], pa.int32())})
    exchange.write_pieces(exchange.piece_file(folder, "0001-map", 5, 0), [other] * PARTITIONS)
    assert _merge_all(folder, 6, 3) == [[], [0]]
    assert not exchange.merged_file(folder, "0001-map", 1, 0).exists()
    for q in range(PARTITIONS):
        one = exchange.Gather(folder, "0001-map", 0, 6, q)
        two = exchange.Gather(folder, "0001-map", 0, 6, q, fanin=3, unmerged=(1,))
        assert _batches(two) == _batches(one)
        assert [t.schema for t in two.read()][-3:] == [t.schema for t in one.read()][-3:]


def test_the_threshold_keeps_small_steps_one_level() -> None:
    assert fanin.fanin(fanin.FANIN_FROM - 1) == 0
    assert fanin.fanin(64) == 8 and fanin.fanin(65) == 9 and fanin.fanin(256) == 16


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_a_merge_task_killed_after_writing_is_retried_to_the_same_files(
    ray_local, tmp_path
) -> None:
    """The worker running a merge dies after writing (before returning); Ray runs the task
    again (max_retries) and the consumers read what a clean merge gives them."""
    folder = str(tmp_path / "x")
    _producers(folder, 8)
    clean = str(tmp_path / "clean")
    _producers(clean, 8)
    _merge_all(clean, 8, 4)

    def dying_merge(marker: str, *args: object) -> list[int]:
        left = fanin.merge(*args)  # type: ignore[arg-type]
        if not os.path.exists(marker):
            Path(marker).touch()
            os._exit(1)
        return left

    task = ray_local.remote(max_retries=2)(dying_merge)
    markers = [str(tmp_path / f"died-{k}") for k in range(2)]
    refs = [
        task.remote(markers[k], folder, "0001-map", 1, PARTITIONS, k, 4 * k, 4 * k + 4)
        for k in range(2)
    ]
    assert ray_local.get(refs, timeout=180) == [[], []]
    assert all(os.path.exists(m) for m in markers)  # each first attempt died
    for k in range(2):
        got = exchange.merged_file(folder, "0001-map", k, 0).read_bytes()
        assert got == exchange.merged_file(clean, "0001-map", k, 0).read_bytes()


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_two_level_exchange_tags_like_one_level_and_the_objects(
    ray_local, tmp_path, monkeypatch
) -> None:
    """FANIN_FROM lowered (the driver decides it) so the fixture's 4 parts and 5 partitions
    take merge steps: tags equal to the object exchange and in-process dedup (_compare), and
    to the one-level file exchange."""
    table, _ = load_fixture()
    sizes = [10, 1, 6, table.num_rows - 17]
    config = DedupConfig(num_partitions=5)
    one, _ = _compare(ray_local, tmp_path / "one", table, sizes, config)
    monkeypatch.setattr(fanin, "FANIN_FROM", 2)
    two, stage = _compare(ray_local, tmp_path / "two", table, sizes, config)
    assert two.equals(one) and two.schema == one.schema
    merges = [step for step, _ in stage.timeline if step.endswith("-merge")]
    assert "map-merge" in merges and "large-scatter-merge" in merges, merges
