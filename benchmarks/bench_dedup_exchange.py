"""The dedup aggregate's exchange: through files (data_pipeline.dedup.exchange, what `pretrain
data run` uses) vs through Ray objects (the baseline: the exchange before, still used by
`DedupStage.apply` on a Ray Dataset), on the same persisted parts, alternating.

`--docs` real documents (CORPUS/web.jsonl.gz, the first ones, with every `--copy-every`-th one
repeated with one word changed so clusters exist) are cut into `--parts` input parts whose map
side is persisted as `pretrain data run` persists it; then `dedup_parts` + the joins run at each
of `--partitions`, each side `--repeat` times in alternation (files, objects, files, ...). Per
side: best wall (Ray start-up excluded: one local Ray for the whole run, warmed first), the
dedup tasks' CPU-seconds, the driver's CPU-seconds, and what the driver hands over per step
(objects vs small values). The tags of both sides are compared and must be equal.

    .venv/bin/python -m benchmarks.bench_dedup_exchange --corpus DIR [--docs 2000]
        [--parts 8] [--partitions 4 32] [--repeat 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import add_corpus_argument, corpus_dir, write_result
from data_pipeline.dedup import tasks
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.distributed import dedup_parts
from data_pipeline.stagekit import MapOutput
from data_pipeline.stages.dedup import DedupStage
from pretrain import rayinit


def documents(corpus: Path, docs: int, copy_every: int) -> pa.Table:
    texts: list[str] = []
    with gzip.open(corpus / "web.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            text = json.loads(line)["text"]
            texts.append(text)
            if len(texts) % copy_every == 0 and len(texts) < docs:
                texts.append(text.replace(" ", " edited ", 1))
            if len(texts) >= docs:
                break
    return pa.table({"id": [f"web/{i}" for i in range(len(texts))], "text": texts[:docs]})


def persist(folder: Path, table: pa.Table, parts: int, config: DedupConfig) -> list[MapOutput]:
    folder.mkdir(parents=True)
    bounds = [table.num_rows * k // parts for k in range(parts + 1)]
    outputs = []
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        rows = table.slice(lo, hi - lo)
        bands, exact, docs, info = tasks.map_tables(rows, config)
        files = {}
        for name, part in {"rows": rows, "bands": bands, "exact": exact, "docs": docs}.items():
            files[name] = str(folder / f"p-{i:05d}.{name}.parquet")
            pq.write_table(part, files[name])
        outputs.append(MapOutput(f"p-{i:05d}", rows=files.pop("rows"), files=files, info=info))
    return outputs


def once(ray: Any, parts: list[MapOutput], config: DedupConfig, files: bool) -> dict[str, Any]:
    stage = DedupStage(config)
    driver, wall = time.process_time(), time.perf_counter()
    joins, stats = dedup_parts(parts, config, stage, files=files)
    attach = ray.remote(tasks.attach_file)
    tagged = ray.get([attach.remote(p.rows, i, *joins[i]) for i, p in enumerate(parts)])
    return {
        "wall_s": time.perf_counter() - wall,
        "driver_cpu_s": time.process_time() - driver,
        "task_cpu_s": stage.cost["cpu_s"],
        "rounds": stats.extra["component_rounds"],
        "disk": stats.extra.get("exchange", {}),  # piece-file bytes written, most alive at once
        "tags": pa.concat_tables(tagged).select(["dup_cluster", "dup_keep", "dup_cluster_size"]),
    }


def handed_over(parts: int, partitions: int, rounds: int, files: bool) -> dict[str, int]:
    """What the driver owns per step: the map's and a star step's pieces."""
    star_steps = 2 * rounds + 1
    if files:
        return {"map": parts * 4, "star_step": partitions, "star_steps": star_steps}
    return {"map": parts * 4 * partitions, "star_step": partitions**2, "star_steps": star_steps}


def side(ray: Any, parts: list, config: DedupConfig, repeat: int) -> dict[str, Any]:
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for _ in range(repeat):
        for files in (True, False):
            runs[files].append(once(ray, parts, config, files))
    tags = [r["tags"] for r in runs[True] + runs[False]]
    if not all(t.equals(tags[0]) for t in tags):
        raise SystemExit("the two exchanges tagged differently: a bug, not a benchmark result")
    result: dict[str, Any] = {}
    for files, name in ((True, "files"), (False, "objects")):
        best = {k: round(min(r[k] for r in runs[files]), 3) for k in ("wall_s", "task_cpu_s")}
        best["driver_cpu_s"] = round(min(r["driver_cpu_s"] for r in runs[files]), 3)
        rounds = runs[files][0]["rounds"]
        best["handed_over"] = handed_over(len(parts), config.num_partitions or 0, rounds, files)
        if files:
            best["disk"] = runs[files][0]["disk"]
        result[name] = best
    for key in ("wall_s", "task_cpu_s", "driver_cpu_s"):
        result[f"{key}_files_over_objects"] = round(
            result["files"][key] / max(result["objects"][key], 1e-9), 3
        )
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    add_corpus_argument(parser)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--copy-every", type=int, default=10)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 32])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv if argv is not None else [])
    table = documents(corpus_dir(args.corpus), args.docs, args.copy_every)
    import ray

    start = time.perf_counter()
    started = rayinit.connect(None, num_cpus=2)  # address="local", loopback, telemetry off
    ray_start_s = time.perf_counter() - start
    result: dict[str, Any] = {"input": {"docs": table.num_rows, "parts": args.parts}}
    try:
        with tempfile.TemporaryDirectory(prefix="bench_dedup_exchange_") as tmp:
            base = DedupConfig()
            parts = persist(Path(tmp) / ".parts" / "global" / "dedup", table, args.parts, base)
            once(ray, parts, base.model_copy(update={"num_partitions": 2}), True)  # warm
            once(ray, parts, base.model_copy(update={"num_partitions": 2}), False)
            for partitions in args.partitions:
                config = base.model_copy(update={"num_partitions": partitions})
                result[f"partitions_{partitions}"] = side(ray, parts, config, args.repeat)
    finally:
        rayinit.shutdown(started)
    result["ray_start_s"] = round(ray_start_s, 2)
    result["machine"] = {"shared": True, "cpus_for_ray": 2}
    write_result("bench_dedup_exchange", result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
