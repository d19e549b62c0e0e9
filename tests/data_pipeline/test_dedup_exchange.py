"""The dedup exchange through files (data_pipeline.dedup.exchange): the pieces read back are the
pieces written, and an aggregate over persisted parts tags the same whatever its partition count
(many partitions, many of them empty, against two), on the byte-identity fixture and on a larger
random set; only the joins' tags outlive the aggregate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.dedup import exchange, tasks
from data_pipeline.dedup.aggregate import dedup_parts
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.stage_types import AGGREGATE_SCRATCH, MapOutput
from data_pipeline.stages.dedup import DedupStage
from tests.data_pipeline.raytools import DEDUP_CONFIG
from tests.data_pipeline.test_dedup import load_fixture


def _pieces() -> list[pa.Table]:
    table = pa.table(
        {
            "vertex": pa.array([5, -3, 7, 2**62, 11, 0], pa.int64()),
            "sig": pa.array(
                [b"abcd", b"\x00\x01\x02\x03", b"wxyz", b"1234", b"5678", b"0000"], pa.binary(4)
            ),
            "shingles": pa.array([[1, 2], [], None, [3], [4, 5, 6], [7]], pa.list_(pa.uint32())),
            "id": ["a", "b", None, "d", "é", "f"],
        }
    )
    # partitions 0 and 3 are empty; partition 2 spans two chunks
    chunked = pa.concat_tables([table.slice(2, 2), table.slice(4, 1)])
    return [table.slice(0, 0), table.slice(0, 2), chunked, table.slice(0, 0), table.slice(5)]


def test_pieces_read_back_are_the_pieces_written(tmp_path: Path) -> None:
    pieces = _pieces()
    path = exchange.piece_file(str(tmp_path), "0001-map", 3, 1)
    exchange.write_pieces(path, pieces)
    for q, piece in enumerate(pieces):
        got = exchange.read_piece(path, q)
        assert got.schema == piece.schema and got.equals(piece)
    gather = exchange.Gather(str(tmp_path), "0001-map", 1, 1, 2)
    gather_file = exchange.piece_file(str(tmp_path), "0001-map", 0, 1)
    exchange.write_pieces(gather_file, pieces)
    assert tasks.concat([gather]).equals(pieces[2])
    assert tasks.concat([exchange.Gather(str(tmp_path), "0001-map", 1, 1, 0)]).num_rows == 0


def test_a_missing_producer_file_is_an_error_not_an_empty_partition(tmp_path: Path) -> None:
    exchange.write_pieces(exchange.piece_file(str(tmp_path), "s", 0, 0), _pieces())
    gather = exchange.Gather(str(tmp_path), "s", 0, 2, 1)  # producer 1 never wrote its file
    with pytest.raises(FileNotFoundError):
        gather.read()


def test_every_byte_flipped_in_a_piece_file_is_an_error_naming_it_or_unread(tmp_path) -> None:
    """Flip each byte of a piece file in turn (same size): each partition's read either raises
    ExchangeFileError naming the file or returns exactly its piece (the byte was not its)."""
    pieces = _pieces()
    path = exchange.piece_file(str(tmp_path), "s", 0, 0)
    exchange.write_pieces(path, pieces)
    good = path.read_bytes()
    refused = 0
    for pos in range(len(good)):
        flipped = bytearray(good)
        flipped[pos] ^= 0x10
        path.write_bytes(bytes(flipped))
        errors = 0
        for q, piece in enumerate(pieces):
            try:
                got = exchange.read_piece(path, q)
            except exchange.ExchangeFileError as exc:
                assert str(path) in str(exc) and "run the same command again" in str(exc)
                errors += 1
                continue
            assert got.schema == piece.schema and got.equals(piece), (pos, q)
        assert errors, f"byte {pos} of {len(good)} changed and every partition still read"
        refused += errors
    assert refused >= len(good)
    path.write_bytes(good[:-1])  # cut short: the trailer is gone
    with pytest.raises(exchange.ExchangeFileError, match="format marker"):
        exchange.read_piece(path, 0)


def test_a_full_disk_under_a_piece_file_is_the_one_line_error_naming_it(
    ray_local, tmp_path, capsys
) -> None:
    """A producer task whose write the disk refuses (a file-size limit in the worker: EFBIG, as
    ENOSPC is on a full disk) fails the job with the one-line disk-full error naming the file."""
    import argparse

    from pretrain.errors import os_refusal
    from pretrain.program import run

    def limited_produce(folder: str) -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write, not a killed worker
        resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))
        exchange.producer(lambda: [*_pieces(), {"info": 1}])(1, 5, (folder, "0001-map", 3))

    task = ray_local.remote(max_calls=1, max_retries=0)(limited_produce)  # the worker then exits
    with pytest.raises(ray_local.exceptions.RayTaskError) as caught:
        ray_local.get(task.remote(str(tmp_path)), timeout=120)
    full = os_refusal(caught.value)
    name = exchange.piece_file(str(tmp_path), "0001-map", 3, 0)
    assert full is not None and full.filename == str(name)
    assert not list(Path(name).parent.iterdir())  # no partial file, no temporary left

    def handler(args: argparse.Namespace) -> int:
        raise caught.value

    parser = argparse.ArgumentParser(prog="pretrain")
    parser.set_defaults(handler=handler, command="data")
    assert run(parser, []) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"File too large writing {name}; free space" in err


@pytest.mark.ray
def test_a_changed_piece_file_fails_its_step_with_one_line_naming_it(ray_local, tmp_path) -> None:
    """A consumer task reading a changed file: the aggregate's wait raises the file's
    ExchangeFileError itself (no Ray traceback), which the CLI prints as one line."""
    from data_pipeline.dedup.aggregate import Runner

    edges = tasks.edges_table(np.array([1, 2, 3]), np.array([0, 0, 1]))
    path = exchange.piece_file(str(tmp_path), "0001-large-scatter", 0, 0)
    exchange.write_pieces(path, [edges.slice(0, 2), edges.slice(2)])
    data = bytearray(path.read_bytes())
    data[len(edges.schema.serialize()) + 60] ^= 0x01  # inside partition 0's record batch
    path.write_bytes(bytes(data))
    run = Runner(DedupConfig(), str(tmp_path))
    gather = exchange.Gather(str(tmp_path), "0001-large-scatter", 0, 1, 0)
    with pytest.raises(exchange.ExchangeFileError) as caught:
        run.step("large-star", tasks.star, 1, 2, [("large", "small", 2, gather)])
    assert type(caught.value) is exchange.ExchangeFileError
    assert str(caught.value).startswith(f"dedup exchange file {path} has partition 0 not match")
    assert "\n" not in str(caught.value)
    assert exchange.read_piece(path, 1).equals(edges.slice(2))  # partition 1's bytes are intact


def _persist(folder: Path, table: pa.Table, sizes: list[int], config: DedupConfig) -> list:
    """Input parts of `sizes` rows, each with its map side persisted as `pretrain data run`
    does (global_parts.persist: rows + bands/exact/docs Parquet files)."""
    folder.mkdir(parents=True)
    parts, lo = [], 0
    for i, n in enumerate(sizes):
        rows = table.slice(lo, n)
        lo += n
        bands, exact, docs, info = tasks.map_tables(rows, config)
        files = {}
        for name, part_table in {
            "rows": rows,
            "bands": bands,
            "exact": exact,
            "docs": docs,
        }.items():
            files[name] = str(folder / f"p-{i:05d}.{name}.parquet")
            pq.write_table(part_table, files[name])
        parts.append(MapOutput(f"p-{i:05d}", rows=files.pop("rows"), files=files, info=info))
    assert lo == table.num_rows
    return parts


def _tag(ray, parts: list, config: DedupConfig) -> tuple[pa.Table, DedupStage]:
    stage = DedupStage(config)
    joins, stage.stats = dedup_parts(parts, config, stage)
    tagged = [tasks.attach(pq.read_table(p.rows), i, *joins[i]) for i, p in enumerate(parts)]
    return pa.concat_tables(tagged), stage


def _compare(ray, tmp_path: Path, table: pa.Table, sizes: list[int], config: DedupConfig):
    """The aggregate at `config`'s partitions and at 2 partitions: the same tags and counts."""
    tagged, runs = {}, {}
    for name, at in (("many", config), ("two", config.model_copy(update={"num_partitions": 2}))):
        root = tmp_path / name
        parts = _persist(root / ".parts" / "global" / "dedup", table, sizes, at)
        tagged[name], runs[name] = _tag(ray, parts, at)
        steps = sorted(p.name for p in (root / ".parts/global/dedup/exchange").glob("*/*"))
        assert len(steps) == 1 and steps[0].endswith("-keep")  # only the joins' tags stay
        disk = runs[name].stats.extra["exchange"]  # each step's files went once it was read
        assert 0 < disk["peak_bytes"] < disk["written_bytes"], disk
    assert tagged["many"].equals(tagged["two"])
    counts = [{k: v for k, v in s.stats.as_dict().items() if k != "extra"} for s in runs.values()]
    assert counts[0] == counts[1]  # documents, candidates, verified pairs, clusters, dropped
    return tagged["many"], runs["many"]


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_the_aggregate_tags_alike_at_any_partition_count_on_the_fixture(
    ray_local, tmp_path
) -> None:
    table, _ = load_fixture()
    tagged, stage = _compare(
        ray_local, tmp_path, table, [10, 1, 6, table.num_rows - 17], DedupConfig(num_partitions=5)
    )
    assert stage.stats.dropped == 9 and tagged.num_rows == table.num_rows


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_aggregate_tags_alike_with_many_partitions(ray_local, tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    vocab = np.array([f"w{i}" for i in range(2000)])
    bases = [" ".join(rng.choice(vocab, 80)) for _ in range(90)]
    texts = []
    for i in range(300):
        words = bases[i % 90].split()
        for pos in rng.choice(len(words), int(rng.integers(0, 6)), replace=False):
            words[pos] = f"edit{i}"
        texts.append(" ".join(words))
    table = pa.table(
        {
            "id": [f"doc-{rng.integers(10**9):09d}-{i}" for i in range(300)],
            "text": texts,
            "quality_score": pa.array(rng.random(300), pa.float32()),
        }
    )
    config = DedupConfig(num_partitions=33, batch_size=64)
    tagged, stage = _compare(ray_local, tmp_path, table, [110, 7, 1, 92, 90], config)
    assert stage.stats.extra["partitions"] == 33
    assert 0 < sum(tagged.column("dup_keep").to_pylist()) < 300


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_data_run_writes_the_same_bytes_at_any_partition_count(
    ray_local, tmp_path, dedup_out
) -> None:
    from data_pipeline import runner
    from data_pipeline.config import PipelineConfig
    from pretrain import shards_layout as layout
    from pretrain_app.cli import main

    def published(out: Path) -> dict[str, bytes]:
        paths = [out / layout.LEDGER, *sorted((out / layout.DATA_DIR).glob("*"))]
        paths += sorted((out / layout.REJECTS_DIR).glob("*"))
        return {p.relative_to(out).as_posix(): p.read_bytes() for p in paths}

    # dedup_out: DEDUP_CONFIG's job at 9 partitions, in process on the session's Ray
    assert not list((dedup_out / layout.GLOBAL_MAP_DIR).rglob(AGGREGATE_SCRATCH))
    assert main(["verify", str(dedup_out)]) == 0
    two = {
        **DEDUP_CONFIG,
        "output": str(tmp_path / "two"),
        "stages": {"extract": {}, "dedup": {"num_partitions": 2}},
        "ray": {"timeout_s": 200},
    }
    runner.run_pipeline(PipelineConfig.model_validate(two), progress=False)
    assert published(tmp_path / "two") == published(dedup_out)
