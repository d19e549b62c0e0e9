"""Many small inputs (issue 34): `pretrain data run` against datatrove on the same directory of
one-document JSON Lines files (10,000 in the claim), start-up reported apart.

    python -m benchmarks.bench_small_files --prepare WORK --corpus DIR [--files N]
    python -m benchmarks.bench_small_files --child ours|datatrove WORK OUT

`--prepare` writes WORK/input/doc-NNNNN.jsonl, one record each (`{"id", "text"}`, the
development corpus' en.jsonl.gz records in turn). Each child prints READY after its imports and,
last, one JSON line: documents in and out, `job_s` (the work's wall time without start-up) and
`docs_per_s` (documents in / job_s: the claim's figure).

- ours: `run_pipeline` with the job's required stages (extract, langid), its own local Ray on
  the machine's cores; start-up = imports + Ray start (`throughput.fixed.ray_start_s` of the
  manifest), so job_s = wall - Ray start. The job does more than the baseline (extraction,
  language id, ledger, manifest); packing small files into units of work (data_pipeline.inputs.
  pack_units) is what makes its cost follow the bytes, not the number of files.
- datatrove: JsonlReader -> JsonlWriter, LocalPipelineExecutor with tasks = workers = cores
  (datatrove spreads the files over its tasks); start-up = imports; job_s = its run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def prepare(work: Path, corpus: Path, files: int) -> None:
    folder = work / "input"
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(corpus / "en.jsonl.gz", "rt", encoding="utf-8") as handle:
        texts = [json.loads(line)["text"] for line in handle if line.strip()]
    for i in range(files):
        record = {"id": f"d{i}", "text": texts[i % len(texts)]}
        (folder / f"doc-{i:05d}.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    print(json.dumps({"files": files, "bytes": sum(p.stat().st_size for p in folder.iterdir())}))


def child_ours(work: Path, out: Path) -> dict[str, Any]:
    from data_pipeline.config import PipelineConfig
    from data_pipeline.runner import run_pipeline

    print("READY", flush=True)
    config = PipelineConfig.model_validate(
        {"inputs": [str(work / "input")], "output": str(out / "shards")}
    )
    start = time.perf_counter()
    result = run_pipeline(config, progress=False)
    wall = time.perf_counter() - start
    ray_start = result.manifest["throughput"]["fixed"]["ray_start_s"]
    return {
        "documents_in": result.ledger["documents_in"],
        "documents_out": result.ledger["documents_kept"],
        "parts": result.parts,
        "ray_start_s": round(ray_start, 2),
        "job_s": round(wall - ray_start, 2),
    }


def child_datatrove(work: Path, out: Path) -> dict[str, Any]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    print("READY", flush=True)
    cores = os.cpu_count() or 1
    start = time.perf_counter()
    LocalPipelineExecutor(
        [JsonlReader(str(work / "input")), JsonlWriter(str(out / "jsonl"))],
        tasks=cores,
        workers=cores,
        logging_dir=str(out / "logs"),
    ).run()
    wall = time.perf_counter() - start
    written = 0
    for path in (out / "jsonl").glob("*.jsonl.gz"):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            written += sum(1 for line in handle if line.strip())
    read = sum(1 for _ in (work / "input").glob("*.jsonl"))
    return {"documents_in": read, "documents_out": written, "job_s": round(wall, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", type=Path, metavar="WORK")
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--child", choices=("ours", "datatrove"))
    parser.add_argument("paths", nargs="*", type=Path, metavar="WORK OUT")
    args = parser.parse_args(argv)
    if args.prepare is not None:
        if args.corpus is None:
            parser.error("--prepare needs --corpus DIR")
        prepare(args.prepare, args.corpus, args.files)
        return 0
    if args.child is None or len(args.paths) != 2:
        parser.error("give --prepare WORK --corpus DIR, or --child KIND WORK OUT")
    work, out = args.paths
    report = {"ours": child_ours, "datatrove": child_datatrove}[args.child](work, out)
    report["docs_per_s"] = round(report["documents_in"] / max(report["job_s"], 1e-9), 1)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
