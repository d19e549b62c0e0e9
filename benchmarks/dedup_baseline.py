"""The datasketch baseline of benchmarks.bench_dedup_memory, in its own process: stream the
Parquet input in batches of 1,024, MinHash.bulk, then per document `query` (a hit = a duplicate)
and `insert` (word 5-grams, 128 permutations, threshold 0.8, as ours).

    python -m benchmarks.dedup_baseline INPUT_DIR    (prints one JSON line; run_datasketch
                                                       starts it and samples its memory)

Also the `dedup_job` claim's contenders (benchmarks/claims.py): `--prepare WORK` writes
WORK/input (Parquet, bench_minhash.make_docs' documents) and WORK/job.json (`pretrain data run`
with extract, the one required stage, and dedup on it); `INPUT_DIR` is the datasketch side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import bench_minhash
from benchmarks.proctree import MB, TreeSampler

NUM_PERM, THRESHOLD = 128, 0.8


def _shingles(text: str) -> list[bytes]:
    words = bench_minhash._WORD.findall(text.lower())
    if len(words) < 5:
        return [" ".join(words).encode()] if words else []
    return [" ".join(words[i : i + 5]).encode() for i in range(len(words) - 4)]


def datasketch_child(input_dir: str) -> None:
    """The baseline, in its own process: stream, MinHash.bulk, query then insert every doc."""
    import psutil
    import pyarrow.dataset as pads
    from datasketch import MinHash, MinHashLSH

    base_rss = psutil.Process().memory_info().rss / MB
    cpu = time.process_time()
    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
    dropped = []
    for batch in pads.dataset(input_dir).to_batches(columns=["id", "text"], batch_size=1024):
        ids, texts = batch.column("id").to_pylist(), batch.column("text").to_pylist()
        for key, m in zip(ids, MinHash.bulk([_shingles(t) for t in texts], num_perm=NUM_PERM)):
            if lsh.query(m):
                dropped.append(key)
            lsh.insert(key, m, check_duplication=False)
    print(
        json.dumps(
            {
                "base_rss_mb": round(base_rss, 1),
                "cpu_s_self": round(time.process_time() - cpu, 2),
                "bands_rows": [lsh.b, lsh.r],
                "dropped": sorted(dropped),
            }
        )
    )


def run_datasketch(input_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    cmd = [sys.executable, "-m", "benchmarks.dedup_baseline"]
    with TreeSampler() as sampler:
        wall = time.perf_counter()
        proc = subprocess.Popen([*cmd, str(input_dir)], stdout=subprocess.PIPE, text=True, env=env)
        stdout, _ = proc.communicate()
        wall = time.perf_counter() - wall
    if proc.returncode:
        raise SystemExit(f"datasketch baseline failed (exit {proc.returncode})")
    child = json.loads(stdout.strip().splitlines()[-1])
    procs = [sampler.procs[proc.pid]] if proc.pid in sampler.procs else []
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(sum(s.cpu_s for s in procs), 2),
        "peak_rss_mb": round(max(s.peak_rss_mb for s in procs), 1),
        "peak_pss_mb": round(max(s.peak_pss_mb for s in procs), 1),
        **child,
    }


def prepare(work: Path, corpus: Path, docs: int) -> None:
    from benchmarks.bench_dedup_memory import write_input

    bench_minhash.CORPUS = corpus
    write_input(bench_minhash.make_docs(docs), work / "input")
    config = {
        "inputs": [str(work / "input")],
        "output": str(work / "ours"),
        "stages": {"extract": {}, "dedup": {}},
    }
    (work / "job.json").write_text(json.dumps(config))


if __name__ == "__main__":
    if sys.argv[1] == "--prepare":  # --prepare WORK CORPUS DOCS
        prepare(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
    else:
        print("READY", flush=True)  # imports are the child's own: start-up is Python's
        datasketch_child(sys.argv[1])
