"""The data job's driver at the part counts of a 40 TB run: CPU per part and per file of the
bookkeeping the driver does alone, on synthetic outputs of 1k/10k/100k parts (local, and an
S3-compatible server: moto), ours beside the way it was done before in the same run.

Each part of the synthetic output is what a finished part leaves: `data/<shard>.parquet` and
`_rejects/<shard>.pq` (random bytes of `--file-kb`), its ledger fragment recording both files'
bytes and sha256, and per input (`--parts-per-input` parts) a read record. Measured, in the driver
process (`time.process_time`, so load on the machine counts less than in wall time):

- `manifest`: the end of a run, ledger fragments read + manifest written. Baseline `rehash`: the
  manifest hashes every listed file again (every byte read back: the driver before 2026-12-02
  13:00); ours `recorded`: the digests the workers recorded in the fragments are used (read once
  with the fragments, each checked against the listed size).
- `resume`: the scan a resumed run makes of every finished part. Baseline `per_object`: each
  part checked on its own (on an object store: a HEAD per file and every byte read back); ours
  `parts.finished_parts` (an object store's sizes and times from one listing per folder).
- `identity`: the input identity checks of a resumed run (size, mtime, content hash), baseline one
  after another, ours `fingerprint.input_identities` (threads on an object store).
- `readahead` (object store only): the driver's per-part reads, the resume scan
  (`parts.finished_parts`), the ledger assembly (`runner._collect`) and the stream's progress
  count (`parts.records_to_read`, one read record per input), baseline `serial` (one
  request at a time: `parts.READ_AHEAD = 1`, the driver before 2026-12-03 09:30), ours
  `ahead` (READ_AHEAD in flight, consumed in order). moto on loopback answers in ~1 ms of its own
  CPU; a real store's round trip is ~10-30 ms of waiting: `--s3-delay-ms N` serves the s3 rows
  from moto with N ms added to every request (tests/data_pipeline/moto_latency.py).

- `verify` (object store, `--verify`): the driver's check of a global stage's persisted map
  side before its aggregate (`--s3-parts` parts, a rows file and one table of `--file-kb` each),
  baseline `per_file` (every file's HEADs and bytes, part after part: the driver before
  2026-12-04), ours `listed` (global_parts.loaded: sizes and times from one listing, records
  READ_AHEAD at a time).
- `handover` (object store, `--handover`): the end of a run, ledger assembly + manifest, baseline
  `read_back` (every part's fragment read back, READ_AHEAD in flight: the driver before
  2026-12-04), ours `handed` (the fragments the merge handed the driver are folded, none read:
  ledger.Merged).

Run: `python -m benchmarks.bench_driver_scale --parts 1000 10000 100000 --s3-parts 1000`;
read-ahead: `python -m benchmarks.bench_driver_scale --parts --s3-parts 1000 --s3-delay-ms 0 20`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from data_pipeline import fingerprint, global_parts, ledger, parts, runner
from data_pipeline.formats import InputFile
from pretrain import shards_layout as layout
from pretrain import storage
from pretrain.manifest import write_manifest

FRAGMENT_ROW = {"stage": "pass", "reason": "pass", "domain": "d", "lang": "en", "outcome": "kept"}


def _part(i: int, per_input: int) -> tuple[str, str]:
    stem = f"in{i // per_input:07d}"
    return stem, f"{stem}-{i % per_input:05d}"


def _write(path: storage.OutPath, data: bytes) -> None:
    if isinstance(path, Path):
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def build_output(out: storage.OutPath, count: int, per_input: int, file_kb: int) -> list[str]:
    """A finished output of `count` parts; returns the input stems."""
    stems: list[str] = []
    for i in range(count):
        stem, shard = _part(i, per_input)
        files = {}
        for rel in (layout.data_file(shard), layout.rejects_file(shard)):
            data = os.urandom(file_kb << 10)
            _write(out / rel, data)
            files[rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "rows": 1}
        row = {**FRAGMENT_ROW, "documents": 1, "bytes": 1, "text_bytes": 1}
        fragment = {"shard": shard, "files": files, "rows": [row], "flags": {}, "documents": 1}
        _write(parts.part_record_path(out, shard), json.dumps(fragment).encode())
        if not stems or stems[-1] != stem:
            stems.append(stem)
    for stem in stems:
        record = {"records": per_input, "bytes": per_input, "parts": per_input}
        _write(parts.read_stats_path(out, stem), json.dumps(record).encode())
    return stems


def _cpu(func: Callable[[], Any]) -> tuple[float, float]:
    """(driver CPU-seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    func()
    return time.process_time() - cpu, time.perf_counter() - wall


def manifest_sides(out: storage.OutPath, stems: list[str], per_input: int) -> dict[str, Any]:
    def rehash() -> None:
        led = runner.ledger.aggregate(
            (parts.load_json(parts.part_record_path(out, s)) for s in _shards(stems, per_input)),
            [],
            0,
            0,
        )
        write_manifest(out, "bench", counts={"parts": led["parts"]})

    def recorded() -> None:
        merged = runner.ledger.Merged()
        for shard in _shards(stems, per_input):
            merged.add_record(shard, parts.part_record_path(out, shard).read_bytes())
        write_manifest(out, "bench", known=merged.known)

    return {"rehash": _cpu(rehash), "recorded": _cpu(recorded)}


def _shards(stems: list[str], per_input: int) -> Iterator[str]:
    for stem in stems:
        for part in range(per_input):
            yield f"{stem}-{part:05d}"


def identity_sides(inputs: list[InputFile]) -> dict[str, Any]:
    return {
        "serial": _cpu(lambda: [fingerprint.file_identity(item) for item in inputs]),
        "ours": _cpu(lambda: fingerprint.input_identities(inputs)),
    }


def handed_over(out: storage.OutPath, stems: list[str], per_input: int) -> ledger.Merged:
    """What the merge of a run hands the driver: every part's fragment, as written (read here,
    untimed, to stand in for the merge's returned rows)."""
    merged = ledger.Merged()
    for shard in _shards(stems, per_input):
        merged.add_record(shard, parts.part_record_path(out, shard).read_bytes())
    return merged


def handover_sides(out: storage.OutPath, stems: list[str], per_input: int) -> dict[str, Any]:
    """The end of a run (ledger assembly + manifest): `read_back` reads every part's fragment
    (READ_AHEAD in flight: the driver before 2026-12-04), `handed` folds what the merge handed
    over and reads none (ledger.Merged)."""
    merged = handed_over(out, stems, per_input)

    def end(with_: ledger.Merged) -> None:
        runner._collect(out, stems, [], with_)
        write_manifest(out, "bench", known=with_.known)

    return {"read_back": _cpu(lambda: end(ledger.Merged())), "handed": _cpu(lambda: end(merged))}


def build_map_side(out: storage.OutPath, count: int, file_kb: int) -> dict[str, int]:
    """A global stage's persisted map side of `count` parts (rows + one table of `file_kb`
    each, global_parts.persist); returns part -> rows."""
    import pyarrow as pa

    rows: dict[str, int] = {}
    for i in range(count):
        part = f"map{i // 2:07d}-{i % 2:05d}"
        texts = [os.urandom(file_kb << 9).hex()]
        table = pa.table({"text": texts, "_raw_bytes": pa.array([len(texts[0])], pa.int64())})
        keys = pa.table({"key": pa.array(list(range(file_kb << 7)), pa.uint64())})
        global_parts.persist(out, "bench", part, table, {"keys": keys}, depends="")
        rows[part] = 1
    return rows


def verify_sides(out: storage.OutPath, rows: dict[str, int]) -> dict[str, Any]:
    """The driver's check of the map side before the aggregate: baseline `per_file` (each
    part's record, then every file's HEADs and bytes, one part after another: the driver before
    2026-12-04), ours `listed` (global_parts.loaded: one listing, READ_AHEAD records at a
    time)."""

    def per_file() -> None:
        assert all(global_parts.load(out, "bench", p, n, "") for p, n in rows.items())

    def listed() -> None:
        assert all(global_parts.loaded(out, "bench", rows, ""))

    return {"per_file": _cpu(per_file), "listed": _cpu(listed)}


def readahead_sides(out: storage.OutPath, stems: list[str]) -> dict[str, Any]:
    """Resume scan + ledger assembly read one at a time, then READ_AHEAD at a time."""
    sides: dict[str, Any] = {}
    ahead = parts.READ_AHEAD
    for side, in_flight in (("serial", 1), ("ahead", ahead)):
        parts.READ_AHEAD = in_flight
        try:
            sides[side] = {
                "resume": _cpu(lambda: parts.finished_parts(out)),
                "ledger": _cpu(lambda: runner._collect(out, stems, [], ledger.Merged())),
                "progress": _cpu(lambda: parts.records_to_read(out, stems, set(), 5000)),
            }
        finally:
            parts.READ_AHEAD = ahead
    sides["in_flight"] = ahead
    return sides


def measure(out: storage.OutPath, count: int, args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    stems = build_output(out, count, args.parts_per_input, args.file_kb)
    row = measure_built(out, count, stems, args)
    row["build_s"] = time.perf_counter() - start
    return row


def measure_built(
    out: storage.OutPath, count: int, stems: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    row: dict[str, Any] = {"parts": count, "files": 3 * count + len(stems)}
    row["manifest"] = manifest_sides(out, stems, args.parts_per_input)
    fragments = [parts.part_record_path(out, s) for s in _shards(stems, args.parts_per_input)]
    row["resume"] = {
        "per_object": _cpu(lambda: [parts.part_verifies(out, f) for f in fragments]),
        "ours": _cpu(lambda: parts.finished_parts(out)),
    }
    sample = [
        InputFile(str(out / parts.read_stats_path(out, s).relative_to(out)), "jsonl", s)
        for s in stems[: args.identity_inputs]
    ]
    row["identity"] = {"inputs": len(sample), **identity_sides(sample)}
    return row


def _per(row: dict[str, Any], key: str, side: str, unit: int) -> str:
    cpu, wall = row[key][side]
    return f"{key}/{side}: {cpu / unit * 1e3:.3f} ms CPU ({wall / unit * 1e3:.3f} ms wall)"


def report(store: str, row: dict[str, Any]) -> None:
    parts_, files = row["parts"], row["files"]
    if "manifest" in row:
        ident = row["identity"]["inputs"]
        sides = [
            _per(row, "manifest", "rehash", files) + " per file",
            _per(row, "manifest", "recorded", files) + " per file",
            _per(row, "resume", "per_object", parts_) + " per part",
            _per(row, "resume", "ours", parts_) + " per part",
            _per(row, "identity", "serial", ident) + " per input",
            _per(row, "identity", "ours", ident) + " per input",
        ]
        print(f"[{store} {parts_} parts, {files} files] " + "; ".join(sides), flush=True)
    if "readahead" in row:
        ahead = row["readahead"]
        walls = [
            f"{what}/{side}: {ahead[side][what][1] / parts_ * 1e3:.3f}"
            for what in ("resume", "ledger", "progress")
            for side in ("serial", "ahead")
        ]
        print(f"[{store} {parts_} parts] readahead, wall ms per part: " + "; ".join(walls))
    if "verify" in row:
        sides = [_per(row, "verify", side, parts_) for side in ("per_file", "listed")]
        print(f"[{store} {parts_} parts] map-side verify, per part: " + "; ".join(sides))
    if "handover" in row:
        sides = [_per(row, "handover", side, parts_) for side in ("read_back", "handed")]
        print(f"[{store} {parts_} parts] end of run, per part: " + "; ".join(sides))


def run_s3(counts: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The s3 rows, once per `--s3-delay-ms` (plain moto for 0)."""
    rows = []
    for delay in args.s3_delay_ms:
        for row in _run_s3(counts, args, delay):
            rows.append({**row, "delay_ms": delay})
    return rows


def _run_s3(counts: list[int], args: argparse.Namespace, delay: float) -> list[dict[str, Any]]:
    from tests.data_pipeline.moto_latency import in_flight, latency_server
    from tests.data_pipeline.s3tools import s3_env, s3_filesystem

    rows = []
    with latency_server(0) as endpoint:
        os.environ.update(s3_env(endpoint))
        s3_filesystem(endpoint).create_dir("bench")
        for count in counts:
            out = storage.output_path(f"s3://bench/out{count}-{delay:g}")
            in_flight(endpoint, delay_ms=0)  # built at moto's own speed
            stems = build_output(out, count, args.parts_per_input, args.file_kb)
            in_flight(endpoint, delay_ms=delay)
            row = {"parts": count, "files": 3 * count + len(stems)}
            if delay == 0:
                row = measure_built(out, count, stems, args)
            if not args.no_readahead:
                row["readahead"] = readahead_sides(out, stems)
            if args.handover:
                row["handover"] = handover_sides(out, stems, args.parts_per_input)
            if args.verify:
                in_flight(endpoint, delay_ms=0)
                map_rows = build_map_side(out / "global", count, args.file_kb)
                in_flight(endpoint, delay_ms=delay)
                row["verify"] = verify_sides(out / "global", map_rows)
            row["served"] = in_flight(endpoint)
            rows.append(row)
            report(f"s3+{delay:g}ms", rows[-1])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--s3-parts", type=int, nargs="*", default=[1000])
    parser.add_argument("--parts-per-input", type=int, default=2)
    parser.add_argument("--file-kb", type=int, default=16)
    parser.add_argument("--identity-inputs", type=int, default=200)
    parser.add_argument("--s3-delay-ms", type=float, nargs="*", default=[0.0])
    parser.add_argument(
        "--handover", action="store_true", help="the s3 end of a run: read back vs handed over"
    )
    parser.add_argument(
        "--verify", action="store_true", help="the s3 map-side verify: per file vs listed"
    )
    parser.add_argument("--no-readahead", action="store_true", help="skip the readahead rows")
    parser.add_argument("--result", default="driver_scale", help="results/<RESULT>.json")
    args = parser.parse_args()
    result: dict[str, Any] = {"args": vars(args), "load": os.getloadavg(), "local": [], "s3": []}
    with tempfile.TemporaryDirectory(prefix="bench-driver-") as tmp:
        os.environ["PRETRAIN_CACHE"] = str(Path(tmp) / "cache")  # the hash cache, fresh
        for count in args.parts:
            result["local"].append(measure(Path(tmp) / f"out{count}", count, args))
            report("local", result["local"][-1])
        result["s3"] = run_s3(args.s3_parts, args) if args.s3_parts else []
    result["load_after"] = os.getloadavg()
    write_result(args.result, result)


if __name__ == "__main__":
    main()
