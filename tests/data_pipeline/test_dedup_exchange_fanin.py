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


def test_on_s3_a_consumer_reads_one_object_per_merge_group(tmp_path, monkeypatch) -> None:
    """Through a real S3 API (moto, recording every request): the merge reads each producer's
    object once; a consumer then reads 3 merged objects, not 9 producers' (the requests of one
    partition's read), gets the same batches, and a changed merged object is refused naming it."""
    import json
    import urllib.request

    from pretrain import outstore
    from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem

    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("MOTO_RECORDER_FILEPATH", str(log))
    with moto_server() as endpoint:
        for key, value in s3_env(endpoint).items():
            monkeypatch.setenv(key, value)
        s3 = s3_filesystem(endpoint)
        s3.create_dir("fanin")
        folder = str(outstore.output_path(f"s3://fanin/{tmp_path.name}"))
        _producers(folder, 9)
        urllib.request.urlopen(f"{endpoint}/moto-api/recorder/start-recording")

        def requests() -> list[str]:
            lines = log.read_text().splitlines() if log.exists() else []
            return [json.loads(line)["url"].split("?")[0] for line in lines if line.strip()]

        assert _merge_all(folder, 9, 3) == [[], [], []]
        merged = requests()
        for i in range(9):  # each producer's object read once (its size, then one GET)
            assert sum(u.endswith(f"/0/{i:07d}.arrow") for u in merged) == 2
        for q in range(PARTITIONS):
            seen = len(requests())
            one = _batches(exchange.Gather(folder, "0001-map", 0, 9, q))
            one_level = requests()[seen:]
            two = _batches(exchange.Gather(folder, "0001-map", 0, 9, q, fanin=3))
            two_level = requests()[len(one_level) + seen :]
            assert one == two and one
            assert {u.rsplit("/", 1)[1] for u in one_level} == {f"{i:07d}.arrow" for i in range(9)}
            assert {u.rsplit("/", 1)[1] for u in two_level} == {f"m{k:07d}.arrow" for k in range(3)}
            # a read is a HEAD and up to 6 range GETs (none for an empty partition's bytes)
            assert len(two_level) <= 3 * 7 and len(one_level) >= 9 * 6
        path = exchange.merged_file(folder, "0001-map", 2, 0)
        with s3.open_input_stream(path.key) as handle:
            data = bytearray(handle.read())
        data[len(data) // 3] ^= 0x02
        with s3.open_output_stream(path.key) as handle:
            handle.write(bytes(data))
        with pytest.raises(exchange.ExchangeFileError, match=f"dedup exchange file {path} "):
            for q in range(PARTITIONS):
                exchange.Gather(folder, "0001-map", 0, 9, q, fanin=3).read()
