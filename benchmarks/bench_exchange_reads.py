"""Reads of one dedup exchange step: one level (every consumer reads every producer's piece file,
data_pipeline.dedup.exchange, the baseline) vs two levels (merge tasks first combine ~sqrt(M)
producers' files, data_pipeline.dedup.fanin), at each `--partitions` P with M = P producers (a
star step's shape: its producers are the previous step's partitions).

Each producer writes one piece file of P partitions (`--rows` edge rows per partition, as
tasks.star_scatter writes them). Then, per side, every consumer reads its partition through
exchange.Gather, in this one process (the requests, not Ray, are measured; the merge tasks run
here one after another). Counted: local file opens (the consumers' memory maps, the merges'
producer files) and wall; on s3 (a moto
server started here, `--s3-partitions`) every HTTP request the server records. The two sides'
consumers must get equal tables (checked). On s3, from `--s3-sample-from` partitions on, both
sides' consumers read only `--s3-sample` partitions (the same ones) and their requests and wall
are scaled by P / sample (every consumer of a side sends the same number of requests; the row
gives `sampled_consumers`); the merge tasks always run in full.

With `--aggregate P ...`, also a whole dedup aggregate on one local Ray (2 CPUs; the inputs and
runs of benchmarks/bench_dedup_exchange: `--docs` web documents in 8 persisted parts), through
the file exchange at each P partitions, one level vs two levels in every step of P producers
(fanin.FANIN_FROM set to P; the map's 8 producers stay one level), alternating `--repeat` times:
wall, the tasks' CPU-seconds, piece bytes written; the tags must be equal (checked). This is the
cost of the merge step's barrier that FANIN_FROM weighs.

    .venv/bin/python -m benchmarks.bench_exchange_reads [--partitions 16 64 256]
        [--s3-partitions 16 64 256] [--rows 4] [--aggregate 16 32 64 --corpus DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import add_corpus_argument, corpus_dir, write_result
from data_pipeline.dedup import exchange, fanin, tasks
from pretrain import outstore

OPENS = {"count": 0}
_MEMORY_MAP = pa.memory_map


def _counted_memory_map(*args: Any, **kwargs: Any) -> Any:
    OPENS["count"] += 1
    return _MEMORY_MAP(*args, **kwargs)


class _CountedSource(fanin._Source):
    """A merge's producer file, counted as an open (fanin reads it with os.pread, no map)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        OPENS["count"] += 1
        super().__init__(*args, **kwargs)


def produce(folder: str, step: str, partitions: int, rows: int) -> None:
    rng = np.random.default_rng(partitions)
    for i in range(partitions):
        u = rng.integers(0, 2**62, rows * partitions)
        pieces = tasks.scatter(tasks.edges_table(u, u // 3), u, partitions)
        exchange.write_pieces(exchange.piece_file(folder, step, i, 0), pieces)


def merge(folder: str, step: str, partitions: int) -> int:
    width = max(2, fanin.fanin(partitions) or int(np.ceil(np.sqrt(partitions))))
    for k, lo in enumerate(range(0, partitions, width)):
        left = fanin.merge(folder, step, 1, partitions, k, lo, min(lo + width, partitions))
        assert not left, left
    return width


def consume(folder: str, step: str, partitions: int, width: int, sample: int) -> list[Any]:
    chosen = np.linspace(0, partitions - 1, min(sample, partitions)).round().astype(int)
    return [
        tasks.concat([exchange.Gather(folder, step, 0, partitions, int(q), width)])
        for q in sorted(set(chosen.tolist()))
    ]


class Requests:
    """The requests a moto server recorded (MOTO_RECORDER_FILEPATH), counted between marks."""

    def __init__(self, endpoint: str, log: Path) -> None:
        self.endpoint, self.log, self.seen = endpoint, log, 0
        urllib.request.urlopen(f"{endpoint}/moto-api/recorder/start-recording")

    def since(self) -> dict[str, int]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        methods: dict[str, int] = {}
        for line in lines[self.seen :]:
            if line.strip():
                method = json.loads(line)["method"]
                methods[method] = methods.get(method, 0) + 1
        self.seen = len(lines)
        return methods


def measure(folder: str, partitions: int, rows: int, sample: int, requests: Any) -> dict:
    step = "0001-large-scatter"
    produce(folder, step, partitions, rows)
    row: dict[str, Any] = {"partitions": partitions, "producers": partitions}
    counts = requests.since() if requests else None
    row["write_requests"] = counts
    sides = {}
    for side in ("one_level", "two_level"):
        OPENS["count"] = 0
        start = time.perf_counter()
        width = merge(folder, step, partitions) if side == "two_level" else 0
        merged = time.perf_counter()
        merge_requests = requests.since() if requests else None
        tables = consume(folder, step, partitions, width, sample)
        done = time.perf_counter()
        scale = partitions / len(tables)
        consumer = requests.since() if requests else None
        entry: dict[str, Any] = {
            "fanin": width,
            "merge_wall_s": round(merged - start, 3),
            "consume_wall_s": round((done - merged) * scale, 3),
            "sampled_consumers": len(tables) if scale != 1.0 else None,
        }
        if requests is None:
            entry["opens"] = OPENS["count"]
        else:
            entry["merge_requests"] = sum(merge_requests.values())
            entry["merge_requests_by_method"] = merge_requests
            entry["consumer_requests"] = round(sum(consumer.values()) * scale)
            entry["requests"] = entry["merge_requests"] + entry["consumer_requests"]
        sides[side] = (entry, tables)
        row[side] = entry
    one, two = sides["one_level"][1], sides["two_level"][1]
    assert len(one) == len(two) and all(a.equals(b) for a, b in zip(one, two))
    row["tables_equal"] = True
    print(json.dumps(row), flush=True)
    return row


def run_s3(partitions: list[int], args: argparse.Namespace, tmp: Path) -> list[dict]:
    from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem

    log = tmp / "requests.jsonl"
    os.environ["MOTO_RECORDER_FILEPATH"] = str(log)
    rows = []
    with moto_server() as endpoint:
        os.environ.update(s3_env(endpoint))
        s3_filesystem(endpoint).create_dir("bench")
        requests = Requests(endpoint, log)
        for count in partitions:
            sample = args.s3_sample if count >= args.s3_sample_from else count
            folder = str(outstore.output_path(f"s3://bench/x{count}"))
            rows.append(measure(folder, count, args.rows, sample, requests))
    return rows


def run_aggregate(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    import ray

    from benchmarks.bench_dedup_exchange import documents, once, persist
    from data_pipeline.dedup.config import DedupConfig

    ray.init(num_cpus=2, include_dashboard=False)
    table = documents(corpus_dir(args.corpus), args.docs, 10)
    rows = []
    for count in args.aggregate:
        config = DedupConfig(num_partitions=count)
        parts = persist(tmp / f"agg{count}" / ".parts" / "global" / "dedup", table, 8, config)
        once(ray, parts, config, True)  # warm the workers
        row: dict[str, Any] = {"partitions": count, "one_level": [], "two_level": []}
        tags = {}
        for _ in range(args.repeat):
            for side, threshold in (("two_level", count), ("one_level", 10**9)):
                fanin.FANIN_FROM = threshold
                run = once(ray, parts, config, True)
                tags[side] = run.pop("tags")
                row[side].append({k: run[k] for k in ("wall_s", "task_cpu_s", "disk")})
        assert tags["one_level"].equals(tags["two_level"])
        row["tags_equal"] = True
        print(json.dumps(row), flush=True)
        rows.append(row)
    ray.shutdown()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="*", default=[16, 64, 256])
    parser.add_argument("--s3-partitions", type=int, nargs="*", default=[16, 64, 256])
    parser.add_argument("--s3-sample", type=int, default=16)
    parser.add_argument("--s3-sample-from", type=int, default=64)
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--aggregate", type=int, nargs="*", default=[])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=2)
    add_corpus_argument(parser)
    args = parser.parse_args()
    pa.memory_map = _counted_memory_map  # exchange's consumers open local files through it
    fanin._Source = _CountedSource  # type: ignore[misc]  # and the merge tasks through this
    given = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    result: dict[str, Any] = {"args": given, "load": os.getloadavg(), "local": []}
    with tempfile.TemporaryDirectory(prefix="bench-exchange-") as tmp:
        for count in args.partitions:
            folder = str(Path(tmp) / f"x{count}")
            result["local"].append(measure(folder, count, args.rows, count, None))
        result["s3"] = run_s3(args.s3_partitions, args, Path(tmp)) if args.s3_partitions else []
        result["aggregate"] = run_aggregate(args, Path(tmp)) if args.aggregate else []
    result["load_after"] = os.getloadavg()
    reads = args.partitions or args.s3_partitions  # an --aggregate run alone keeps its own file
    write_result("exchange_reads" if reads else "exchange_reads_aggregate", result)


if __name__ == "__main__":
    main()
