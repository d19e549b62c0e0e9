"""The work area of an output, `.parts/`: read records per unit of work, part records per part
(the files it wrote, with bytes and sha256), row files, the global stages' map output, the run's
phase and `scratch/`; a later run reuses every part whose recorded files still verify."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from pretrain import shards_layout as layout
from pretrain.hashcache import remember
from pretrain.storage import (
    ObjectPath,
    OutPath,
    confined,
    listed,
    remove_tree,
    size_and_sha256,
    write_atomic,
)

PARTS = layout.PARTS_DIR
"""Hidden work area of an output: per-part records and per-input read counts."""
ROWS = "rows"
GLOBAL = layout.GLOBAL_MAP_DIR.removeprefix(f"{PARTS}/")
"""`.parts/global/<stage>/`: the persisted map output of each global stage (global_parts), which
the manifest does not list (a cache: `pretrain data clean` removes it)."""
GLOBAL_DIGEST = "global_digest"
"""The part record's key for the digest of the global stages' map output its tags were joined
from (global_parts.run_global_stages): a resume keeps the part only under the same digest."""
SCRATCH = "scratch"
PROGRESS = "progress"


# Bounded read-ahead for the driver's per-part reads in an object store: each read is a round trip
# of waiting, not CPU (at 2M parts and ~5-12 ms a request, reading in turn takes hours). `ordered`
# keeps up to `in_flight` reads running in threads and yields results in the items' order, so what
# the driver computes from them is the same, byte for byte, as reading them in turn, and its
# memory is bounded by the window. Local outputs are read in turn (a read is a system call).
READ_AHEAD = 16
"""Reads in flight at once on an object store (input identities too: fingerprint): enough to hide
a request's latency, few enough that a store's per-client request rate is not the limit."""

Item = TypeVar("Item")
Result = TypeVar("Result")


def in_flight_for(out: OutPath) -> int:
    """READ_AHEAD for an output in an object store, 1 (in turn, no threads) for a local one."""
    return READ_AHEAD if isinstance(out, ObjectPath) else 1


def ordered(
    read: Callable[[Item], Result], items: Iterable[Item], in_flight: int = READ_AHEAD
) -> Iterator[Result]:
    """`read(item)` of every item, in the items' order, with up to `in_flight` reads at once: a
    read's exception is raised when its result is reached (the same first error as in turn). Left
    early it does not wait for the reads still running (the garbage collector may close it in a
    read-ahead thread, where waiting for the pool can hang)."""
    if in_flight <= 1:
        yield from map(read, items)
        return
    pool = ThreadPoolExecutor(in_flight, thread_name_prefix="read-ahead")
    pending: deque[Future[Result]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(read, item))
            if len(pending) >= in_flight:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def part_record_path(out: OutPath, shard: str) -> OutPath:
    return out / PARTS / f"{shard}.json"


def read_stats_path(out: OutPath, stem: str) -> OutPath:
    return out / PARTS / f"{stem}.read.json"


def phase_path(out: OutPath) -> OutPath:
    """The phase the run is in (data_pipeline.throughput.RunClock.marker)."""
    return out / PARTS / PROGRESS / "phase.json"


def rows_dir(out: OutPath, shard: str) -> OutPath:
    return out / PARTS / ROWS / shard


def stage_dir(out: OutPath, stage: str) -> OutPath:
    return out / PARTS / GLOBAL / stage


def record_path(out: OutPath, stage: str, part: str) -> OutPath:
    return stage_dir(out, stage) / f"{part}.json"


def write_parquet(
    table: pa.Table, out: OutPath, relative: str, level: int, compression: str = "zstd"
) -> dict[str, Any]:
    """Write `out/relative` through the scratch directory; returns its {bytes, sha256, rows}."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression=compression,
        compression_level=level,
        row_group_size=max(1, min(table.num_rows, 2048)),
    )
    data = sink.getvalue().to_pybytes()
    record = {
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "rows": table.num_rows,
    }
    if isinstance(out, ObjectPath):  # one PUT: visible whole or not at all
        write_atomic(out / relative, data)
        return record
    # Written in scratch and renamed into place; the scratch folder is cleared at the start of
    # every run (ensure_dirs), so a killed writer never leaves a temporary file beside shards.
    scratch = out / PARTS / SCRATCH
    scratch.mkdir(parents=True, exist_ok=True)
    # The file's own name (unique among the job's files; the writer's process and thread keep
    # two writers apart): its folders joined in would make it longer than a file name may be.
    name = relative.rsplit("/", 1)[-1]
    temporary = scratch / f"{name}.{os.getpid()}.{threading.get_ident()}"
    with open(temporary, "wb") as handle:  # mode 0666 & ~umask, like any file the user writes
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, out / relative)
    remember(out / relative, record["sha256"])  # the hash cache: no check reads it again
    return record


def load_json(path: OutPath) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def records_to_read(out: OutPath, stems: list[str], skip: set[str], shard_rows: int) -> int | None:
    """Rows this run tags: the records of the inputs read less those of their parts in `skip`, once
    every input has been read (else None); read records as `read_records` reads them."""
    numbers: dict[str, list[int]] = {}
    for shard in skip:  # by input once (polled every second: not a look-up per part)
        stem, _, number = shard.rpartition("-")
        numbers.setdefault(stem, []).append(int(number))
    total = 0
    for stem, record in zip(stems, read_records(out, stems), strict=True):
        if record is None:
            return None
        records = int(record.get("records", 0))
        done = numbers.get(stem, ())
        total += records - sum(min(shard_rows, records - p * shard_rows) for p in done)
    return total


def finished_parts(
    out: OutPath, on_verified: Callable[[str, bytes], None] | None = None
) -> set[str]:
    """The parts an earlier run finished whose files still verify (`_verified`); the others are
    forgotten (files deleted). `on_verified` gets each verified part's record bytes, in order (the
    driver folds them instead of reading them again: ledger.Merged)."""
    done: set[str] = set()
    parts_dir = out / PARTS
    if not parts_dir.is_dir():
        return done
    listing = Listing(out) if isinstance(out, ObjectPath) else None
    records = [
        path
        for path in listed(parts_dir, "*.json")
        if "-" in path.stem
        and path.stem.rpartition("-")[2].isdigit()
        and not path.name.endswith(".read.json")
    ]
    checks = ordered(lambda path: _verified(out, path, listing), records, in_flight_for(out))
    for path, data in zip(records, checks, strict=True):
        if data is not None:
            done.add(path.stem)
            if on_verified is not None:
                on_verified(path.stem, data)
        else:
            forget_part(out, path.stem)
    return done


class Listing:
    """Size and modification time of every shard, rejects and part record object of an output in
    an object store (or of the folders `subs`), from one listing each: the resume scan of millions
    of parts then costs no request per object."""

    def __init__(
        self, out: ObjectPath, subs: Iterable[str] = (layout.DATA_DIR, layout.REJECTS_DIR, PARTS)
    ) -> None:
        self.out = out
        self.entries: dict[str, tuple[int, int | None]] = {}
        for sub in subs:
            for info in (out / sub).infos():
                if info.is_file:
                    rel = f"{sub}/{info.base_name}"
                    self.entries[rel] = (int(info.size), info.mtime_ns)

    def exists(self, rel: str) -> bool:
        return rel in self.entries

    def trusted(self, rel: str, record: dict[str, Any], record_file: str) -> bool | None:
        """False when `rel` is absent or not the size its record lists; True when it is and was
        written no later than the record (written after its files: its sha256 is of these bytes);
        None (hash it) else. So of a global stage's map record too (global_parts.persist)."""
        size, mtime = self.entries.get(rel, (-1, None))
        if size != record["bytes"]:
            return False
        written = self.entries.get(record_file, (0, None))[1]
        return True if mtime is not None and written is not None and mtime <= written else None


def part_verifies(out: OutPath, record_file: OutPath) -> bool:
    """True when the part's record is readable and every file it records is intact, and no
    shard or rejects file it does not record is present (`_verified`)."""
    return _verified(out, record_file, None) is not None


def _verified(out: OutPath, record_file: OutPath, listing: Listing | None) -> bytes | None:
    """The part record's bytes when every file it lists is intact (`file_intact`) and it lists
    the part's shard and rejects where they exist, else None."""
    try:
        data = record_file.read_bytes()
        files = json.loads(data)["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    exists = listing.exists if listing is not None else lambda rel: (out / rel).exists()
    for name in (layout.data_file(record_file.stem), layout.rejects_file(record_file.stem)):
        if exists(name) and name not in files:
            return None
    for name, record in files.items():
        confined(out, name, f"part record {record_file}")  # the output's own file, no other
        if not file_intact(out, name, record, f"{PARTS}/{record_file.name}", listing):
            return None
    return data


def file_intact(
    out: OutPath, rel: str, entry: dict[str, Any], record_rel: str, listing: Listing | None
) -> bool:
    """True when `out/rel` has the size and sha256 `entry` holds: locally through the hash cache,
    in an object store from the `listing` where it answers (`Listing.trusted`), else by hashing."""
    path = out / rel
    if listing is not None:
        trusted = listing.trusted(rel, entry, record_rel)
        if trusted is not None:
            return trusted
    elif not path.is_file() or path.stat().st_size != entry["bytes"]:
        return False
    return size_and_sha256(path)[1] == entry["sha256"]


def forget_part(out: OutPath, shard: str) -> None:
    """Delete everything one part wrote (shard, rejects, part record, row files)."""
    for name in (layout.data_file(shard), layout.rejects_file(shard), f"{PARTS}/{shard}.json"):
        (out / name).unlink(missing_ok=True)
    remove_tree(rows_dir(out, shard))


def _global_part(name: str) -> str:
    """`web-00003.rows.pq` or `web-00003.json` (global_parts) -> `web-00003`; the part's
    stem may hold dots (`c4-train.00000-of-01024`), a table name holds none."""
    if name.endswith(".json"):
        return name.removesuffix(".json")
    return name.removesuffix(layout.OTHER_PARQUET).rpartition(".")[0]


def _part_stem(shard: str) -> str | None:
    """`c4-train.00000-of-01024-00003` -> `c4-train.00000-of-01024`: the input a part belongs to
    (its number is the last `-` field, five or more digits); None for a name that is no part."""
    stem, sep, number = shard.rpartition("-")
    return stem if sep and len(number) >= 5 and number.isdigit() else None


def forget_inputs(out: OutPath, stems: Collection[str]) -> None:
    """Delete every part of the units of work `stems` and their read records. Each folder is
    listed once for all of them: a run whose inputs all changed costs one pass over the output, not
    one per input."""
    if not stems:
        return
    stems = set(stems)
    shards: set[str] = set()
    read: set[str] = set()
    folders = (
        layout.DATA_DIR,
        layout.REJECTS_DIR,
        PARTS,
        f"{PARTS}/{ROWS}",
    )
    for sub in folders:
        folder = out / sub
        for path in folder.glob("*") if folder.is_dir() else ():
            if sub == PARTS and path.name.endswith(".read.json"):
                read.add(path.name.removesuffix(".read.json"))
                continue
            name = layout.shard_name(path.name).removesuffix(".json")
            if _part_stem(name) in stems:
                shards.add(name)
    for shard in sorted(shards):
        forget_part(out, shard)
    for stage_dir in listed(out / PARTS / GLOBAL, "*"):  # persisted global-stage map output
        for path in listed(stage_dir, "*") if stage_dir.is_dir() else ():
            if _part_stem(_global_part(path.name)) in stems:
                path.unlink(missing_ok=True)
    for stem in sorted(stems & read):
        read_stats_path(out, stem).unlink(missing_ok=True)


def read_bytes(out: OutPath, paths: Iterable[OutPath]) -> Iterator[bytes | None]:
    """The bytes of every path (None where there is no such file), in order: `READ_AHEAD` at a
    time in an object store, one GET each (no `is_file` HEAD before it)."""

    def read(path: OutPath) -> bytes | None:
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return None

    return ordered(read, paths, in_flight_for(out))


def read_records(out: OutPath, stems: Iterable[str]) -> Iterator[dict[str, Any] | None]:
    """The read record of every input in `stems` (None where it has none yet), in order
    (`read_bytes`)."""
    found = read_bytes(out, (read_stats_path(out, stem) for stem in stems))
    return (None if data is None else json.loads(data) for data in found)


def part_rows(out: OutPath, stems: Sequence[str], shard_rows: int) -> dict[str, int]:
    """Every part (`<stem>-<part:05d>`) of the inputs `stems` -> its row count, from their read
    records (none of an input without one)."""
    rows: dict[str, int] = {}
    for stem, record in zip(stems, read_records(out, stems), strict=True):
        if record is None:
            continue
        records = int(record["records"])
        for part in range(-(-records // shard_rows)):
            rows[f"{stem}-{part:05d}"] = min(shard_rows, records - part * shard_rows)
    return rows


def record_done(record: dict[str, Any] | None, stem: str, done: set[str]) -> bool:
    """True when the read record of input `stem` exists and `done` holds every part it counts."""
    return record is not None and all(f"{stem}-{p:05d}" in done for p in range(record["parts"]))


def ensure_dirs(out: OutPath) -> None:
    for sub in (layout.DATA_DIR, layout.REJECTS_DIR, PARTS):
        (out / sub).mkdir(parents=True, exist_ok=True)
    remove_tree(out / PARTS / SCRATCH)  # a killed writer's temporary files
