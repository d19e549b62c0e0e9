"""Perplexity's global stage at 1x, 4x and 16x the input: what a worker and the driver hold.

Claim (issue 13 item 2): no global stage's memory grows with the corpus. Perplexity's state is
(a) per worker: the KenLM models (fixed by the artifact, not the corpus) and one part's rows,
and (b) in the driver: the merged per-language log-histogram sketch (languages x bins, bounded
by `bins_per_decade` x the decades perplexities span). This measures both, and the resident size
of a loaded model per ARPA byte, which `PerplexityStage.check` uses to refuse a budget
(`ray.worker_memory_mb`) the models cannot fit.

Each scale runs in a fresh child process (like one Ray worker that scores every part in turn):
load the model, then per part of `--part-docs` documents `map_part` (score + the part's sparse
sketch), merge every part's sketch as the driver's `aggregate` does, then bucket each part
(`join_part`). Reported per scale: the child's peak RSS, RSS after the model load, the merged
sketch's rows and bytes. Documents: benchmarks.bench_minhash.make_docs (the development corpus,
`--corpus`); model: order 5, trained by our `train-lm` code (benchmarks.bench_perplexity).

    .venv/bin/python -m benchmarks.bench_perplexity_memory --corpus DIR [--docs 2500]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import bench_minhash, bench_perplexity
from benchmarks.common import add_corpus_argument, corpus_dir, write_result
from data_pipeline.stages.perplexity import LogHistogramSketch

SCALES = (1, 4, 16)


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def child(lm_dir: str, docs: int, part_docs: int, corpus: str) -> dict:
    """One worker's view: model load, then every part mapped, aggregated and joined."""
    import pyarrow as pa

    from data_pipeline.stages.perplexity import PerplexityStage

    bench_minhash.CORPUS = Path(corpus)
    texts = bench_minhash.make_docs(docs)
    before = _rss_mb()
    stage = PerplexityStage(PerplexityStage.Config(model=lm_dir))
    stage.setup()
    after_load = _rss_mb()
    sketch = stage.new_sketch()
    peak = after_load
    parts = []
    for lo in range(0, docs, part_docs):
        chunk = texts[lo : lo + part_docs]
        rows = pa.table(
            {"id": [str(i) for i in range(len(chunk))], "text": chunk, "lang": ["en"] * len(chunk)}
        )
        outputs, _ = stage.map_part(rows)
        sketch.add_table(outputs["sketch"])
        parts.append(outputs["perplexity"])
        peak = max(peak, _rss_mb())
    cutoffs = stage.set_cutoffs(sketch)
    merged = sketch.table()
    return {
        "documents": docs,
        "parts": len(parts),
        "rss_before_model_mb": round(before, 1),
        "rss_after_model_mb": round(after_load, 1),
        "peak_rss_mb": round(peak, 1),
        "stage_peak_mb": round(peak - before, 1),
        "sketch_rows": merged.num_rows,
        "sketch_bytes": merged.nbytes,
        "cutoffs": cutoffs,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_argument(parser)
    parser.add_argument("--docs", type=int, default=2500, help="documents at 1x")
    parser.add_argument(
        "--part-docs", type=int, default=5000, help="documents per part (the runner's shard_rows)"
    )
    parser.add_argument("--max-tokens", type=int, default=300_000, help="LM training tokens")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv if argv is not None else [])
    if args.child:
        lm_dir, docs, part_docs, corpus = args.child
        print(json.dumps(child(lm_dir, int(docs), int(part_docs), corpus)))
        return
    corpus = corpus_dir(args.corpus)
    bench_perplexity.CORPUS = corpus
    with tempfile.TemporaryDirectory() as tmp:
        lm_dir, train_s = bench_perplexity.train_reference_lm(Path(tmp) / "lm", args.max_tokens)
        info = json.loads((lm_dir / "model.json").read_text())["languages"]["en"]
        arpa_mb = (lm_dir / info["file"]).stat().st_size / 2**20
        scales = {}
        for s in SCALES:
            cmd = [sys.executable, "-m", "benchmarks.bench_perplexity_memory", "--child"]
            cmd += [str(lm_dir), str(args.docs * s), str(args.part_docs), str(corpus)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            scales[s] = json.loads(out.strip().splitlines()[-1])
            print(f"{s}x: {scales[s]}")
    load_mb = [r["rss_after_model_mb"] - r["rss_before_model_mb"] for r in scales.values()]
    write_result(
        "perplexity_memory",
        {
            "model": {"order": 5, "ngrams": info["ngrams"], "arpa_mb": round(arpa_mb, 2)},
            "train_s": round(train_s, 1),
            "model_resident_mb_per_arpa_mb": round(max(load_mb) / arpa_mb, 3),
            "part_docs": args.part_docs,
            "peak_rss_mb_by_scale": {s: r["peak_rss_mb"] for s, r in scales.items()},
            # what the stage adds to the process (the harness holds the scale's texts before)
            "stage_peak_mb_by_scale": {s: r["stage_peak_mb"] for s, r in scales.items()},
            "sketch_rows_bound_per_language": LogHistogramSketch().num_bins,
            "sketch_rows_by_scale": {s: r["sketch_rows"] for s, r in scales.items()},
            "sketch_bytes_by_scale": {s: r["sketch_bytes"] for s, r in scales.items()},
            "scales": scales,
        },
    )


if __name__ == "__main__":
    main(sys.argv[1:])
