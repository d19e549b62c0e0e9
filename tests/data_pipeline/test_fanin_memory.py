"""A fan-in merge (data_pipeline.dedup.fanin) streams its group: on s3 (a moto server) and
locally, a group of producers' files several times `budget.merge_bytes` merges with the merge
process's peak memory above its start under that bound (the old merge read every file of the
group into memory, then joined the merged object: ~2x the group), and the merged file gives every
consumer the batches the one-level exchange gives it, byte for byte.

The merge runs in its own process (`python -m tests.data_pipeline.test_fanin_memory`), which
resets its peak RSS (/proc/self/clear_refs) just before the merge and reports VmHWM after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from data_pipeline.dedup import budget, exchange, fanin
from tests.data_pipeline.raytools import REPO, clean_env
from tests.data_pipeline.s3tools import s3_env, s3_filesystem

PARTITIONS = 4
PRODUCERS = 6
PRODUCER_BYTES = 8 << 20  # x 6 = 48 MB a group, 1.2x merge_bytes(6, 4) (40 MB)
STEP = "0001-map"


def _producers(folder: str) -> None:
    """PRODUCERS files of one group: `vertex` + a `blob` of seeded random bytes per row, cut
    into PARTITIONS pieces of unequal sizes (partition 2 empty in every file: no rows)."""
    rows = 16
    for i in range(PRODUCERS):
        rng = np.random.default_rng(i)
        blobs = [rng.bytes(PRODUCER_BYTES // rows) for _ in range(rows)]
        table = pa.table({"vertex": pa.array(rng.integers(0, 2**62, rows), pa.uint64())})
        table = table.append_column("blob", pa.array(blobs, pa.binary()))
        cuts = [0, 3, 3 + i, 3 + i, rows]
        pieces = [table.slice(lo, hi - lo) for lo, hi in zip(cuts[:-1], cuts[1:])]
        exchange.write_pieces(exchange.piece_file(folder, STEP, i, 0), pieces)


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


def _measure(folder: str) -> None:
    """In the merge's own process: peak RSS of one merge over its RSS just before."""
    from data_pipeline.dedup import fanin as merging

    first = exchange.piece_file(folder, STEP, 0, 0)
    first.exists()  # the store's client started (threads, buffers) before the measurement
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _status("VmRSS")
    left = merging.merge(folder, STEP, 1, PARTITIONS, 0, 0, PRODUCERS)
    print(json.dumps({"left": left, "before": before, "peak": _status("VmHWM")}))


def _merge_in_a_process(folder: str, env: dict[str, str]) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.data_pipeline.test_fanin_memory", folder],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, int] = json.loads(done.stdout.splitlines()[-1])
    return result


def _merged_within_the_bound(folder: str, env: dict[str, str]) -> None:
    bound = budget.merge_bytes(PRODUCERS, PARTITIONS)
    group = sum(exchange.piece_file(folder, STEP, i, 0).stat().st_size for i in range(PRODUCERS))
    assert group > bound  # the group is larger than what the merge may hold
    measured = _merge_in_a_process(folder, env)
    assert measured["left"] == []
    grew = measured["peak"] - measured["before"]
    assert grew <= bound, (grew / 2**20, bound / 2**20, group / 2**20)


def _local_merged(tmp_path: Path) -> Path:
    """The group merged locally, checked against the one-level exchange: every consumer decodes
    the same batches (and their bytes) from the merged file as from the producers' files."""
    folder = str(tmp_path / "local")
    _producers(folder)
    _merged_within_the_bound(folder, clean_env(tmp_path / "home"))
    for q in range(PARTITIONS):
        one = exchange.Gather(folder, STEP, 0, PRODUCERS, q)
        two = exchange.Gather(folder, STEP, 0, PRODUCERS, q, fanin=PRODUCERS)
        batches = [b for t in one.read() for b in t.to_batches()]
        assert len(two.read()) == 1
        assert [b for t in two.read() for b in t.to_batches()] == batches
        assert [b.serialize() for t in two.read() for b in t.to_batches()] == [
            b.serialize() for b in batches
        ]
    merged = Path(exchange.merged_file(folder, STEP, 0, 0))
    assert not [p for p in merged.parent.iterdir() if p.name.endswith(".tmp")]
    return merged


@pytest.mark.timeout(300)
def test_a_local_merge_streams_a_group_larger_than_its_budget(tmp_path) -> None:
    """Fails on the old code: its memory maps of the whole group counted in the merge's RSS
    (+48 MB)."""
    _local_merged(tmp_path)


@pytest.mark.timeout(300)
def test_an_s3_merge_streams_a_group_larger_than_its_budget(
    tmp_path, s3_server, monkeypatch
) -> None:
    """The merged object is the local merged file, byte for byte (which the consumers read as
    the one-level exchange). Fails on the old code: it read the group into memory and joined
    the merged object (+~100 MB for the 48 MB group)."""
    from pretrain import outstore

    for name, value in s3_env(s3_server).items():
        monkeypatch.setenv(name, value)
    s3 = s3_filesystem(s3_server)
    s3.create_dir("fanin")
    folder = str(outstore.output_path("s3://fanin/big"))
    _producers(folder)
    _merged_within_the_bound(folder, clean_env(tmp_path / "home", **s3_env(s3_server)))
    local = _local_merged(tmp_path)
    with s3.open_input_stream(exchange.merged_file(folder, STEP, 0, 0).key) as handle:
        assert handle.read() == local.read_bytes()


@pytest.mark.timeout(120)
def test_a_merge_stopped_by_a_changed_producer_leaves_no_merged_object(
    s3_server, monkeypatch
) -> None:
    """The merged object is uploaded as the producers stream through; a partition that does
    not match its sha256 (found after earlier chunks went up) is the ExchangeFileError naming
    its file, and no merged object stays (the completed upload is deleted); the same merge
    over intact files then writes the merged object a consumer reads."""
    from pretrain import outstore
    from tests.data_pipeline.test_dedup_exchange_fanin import _producers as small_producers

    for name, value in s3_env(s3_server).items():
        monkeypatch.setenv(name, value)
    s3 = s3_filesystem(s3_server)
    s3.create_dir("fanin")
    folder = str(outstore.output_path("s3://fanin/changed"))
    small_producers(folder, 3)
    path = exchange.piece_file(folder, STEP, 2, 0)
    good = path.read_bytes()
    data = bytearray(good)
    data[len(data) // 2] ^= 0x01  # the last producer, after the others' first partitions
    path.write_bytes(bytes(data))
    merged = exchange.merged_file(folder, STEP, 0, 0)
    with pytest.raises(exchange.ExchangeFileError, match=f"dedup exchange file {path} has "):
        fanin.merge(folder, STEP, 1, 5, 0, 0, 3)
    assert not merged.exists()
    path.write_bytes(good)
    assert fanin.merge(folder, STEP, 1, 5, 0, 0, 3) == []
    for q in range(5):
        one = exchange.Gather(folder, STEP, 0, 3, q).read()
        two = exchange.Gather(folder, STEP, 0, 3, q, fanin=3).read()
        assert [b for t in two for b in t.to_batches()] == [b for t in one for b in t.to_batches()]


def test_the_merge_bound_is_in_the_smallest_budget() -> None:
    """budget.MIN_WORKER_MEMORY_MB holds a worker and the largest merge task (256 files of
    65,536 partitions), so no accepted budget is too small for a merge."""
    largest = budget.merge_bytes(
        fanin.fanin(budget.MAX_FILE_PARTITIONS), budget.MAX_FILE_PARTITIONS
    )
    assert budget.usable_bytes(budget.MIN_WORKER_MEMORY_MB) >= largest


if __name__ == "__main__":
    _measure(sys.argv[1])
