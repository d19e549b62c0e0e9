"""Tokenizer training: our byte-level BPE (HF `tokenizers`) vs a SentencePiece BPE, same sample.

Input: a `shards` artifact built from the development corpus (`--corpus DIR`: web, en, zh,
code, math; `--mb` MB of text, 2% eval split). Both tokenizers train on the same tag-weighted
sample (ours streams it from the shards; SentencePiece gets the identical stream, line by line)
at the same vocabulary size, each in its own process (time and peak RSS of that process). Then
both encode the eval split: bytes/token overall and per domain (target: ours >= SentencePiece
overall, per domain within 3%).

    python -m benchmarks.bench_tokenizer_train [--mb 100] [--vocab 32768]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import add_corpus_argument, corpus_dir, peak_rss_mb, write_result

CORPUS: Path  # the --corpus directory, set by main()
WORK = Path(os.environ.get("PRETRAIN_BENCH_WORK", "/tmp/pretrain-bench/tokenizer"))
FILES = ("web", "en", "zh", "code", "math")


def _file_records(name: str, quota: int) -> list[dict[str, Any]]:
    records, size = [], 0
    with gzip.open(CORPUS / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            record = json.loads(line)
            text = record.get("text") or ""
            if size >= quota:
                break
            size += len(text.encode("utf-8"))
            domain = record.get("domain") or name
            records.append(
                {
                    "id": f"{name}-{number:06d}",
                    "text": text,
                    "domain": domain,
                    "lang": record.get("lang"),
                    "source": record.get("source"),
                }
            )
    return records


def corpus_shards(mb: float) -> Path:
    """A cached `shards` artifact of about `mb` MB of corpus text (all files, same share each)."""
    from pretrain.errors import PretrainError
    from tests.tokenizer.synthetic import write_shards
    from tokenizer.shards import require_shards

    corpus_key = hashlib.sha256(str(CORPUS.resolve()).encode()).hexdigest()[:8]
    out = WORK / f"shards-{mb:g}mb-{corpus_key}"
    if out.exists():
        try:  # reused only while today's code opens it: a format change rebuilds it
            require_shards(str(out))
            return out
        except PretrainError:
            shutil.rmtree(out)
    sizes = {name: (CORPUS / f"{name}.jsonl.gz").stat().st_size for name in FILES}
    total = sum(sizes.values())
    # compressed size as a proxy for each file's share; quotas in uncompressed bytes
    per_file = {name: int(mb * 1e6 * sizes[name] / total) for name in FILES}
    streams = [_file_records(name, per_file[name]) for name in FILES]
    mixed = [
        r
        for group in zip(*[iter_pad(s, max(map(len, streams))) for s in streams], strict=True)
        for r in group
        if r is not None
    ]
    return write_shards(out, mixed, docs_per_shard=4000, eval_fraction=0.02, stem="corpus")


def iter_pad(items: list[Any], length: int) -> list[Any]:
    return items + [None] * (length - len(items))


def _child(kind: str, shards: str, out: str, vocab: int) -> None:
    """Train one tokenizer in this process; print seconds and peak RSS as JSON."""
    start = time.perf_counter()
    if kind == "ours":
        from tokenizer.config import TokenizerTrainConfig
        from tokenizer.train import train

        train(
            TokenizerTrainConfig(
                data=shards, out=out, vocab_size=vocab, sample={"max_bytes": 10**12}
            ),
        )
    else:
        from tokenizer.baseline import train_sentencepiece
        from tokenizer.evaluate import train_baseline  # noqa: F401 (same sample as eval uses)
        from tokenizer.lock import load_locked
        from tokenizer.shards import require_shards
        from tokenizer.training_sample import SamplePlan, stream_sample

        lock = load_locked(out.replace("sentencepiece", "ours")).lock
        groups = lock["sample"]["groups"]
        plan = SamplePlan(
            {k: g["available_bytes"] for k, g in groups.items()},
            {k: g["inclusion_probability"] for k, g in groups.items()},
            lock["config"]["sample"]["seed"],
            lock["config"]["sample"]["max_doc_chars"],
        )
        processor = train_sentencepiece(stream_sample(require_shards(shards)[1], plan), vocab)
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "sp.model").write_bytes(processor.serialized_model_proto())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "seconds": time.perf_counter() - start,
                "peak_rss_mb": peak_rss_mb(),
                "cpu_seconds": usage.ru_utime + usage.ru_stime,
            }
        )
    )


def _run_child(kind: str, shards: Path, out: Path, vocab: int) -> dict[str, float]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_tokenizer_train",
            "--child",
            kind,
            "--shards",
            str(shards),
            "--out",
            str(out),
            "--vocab",
            str(vocab),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
    )
    if result.returncode != 0:
        raise RuntimeError(f"{kind} training failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def compare(shards: Path, ours_dir: Path, sp_dir: Path) -> dict[str, Any]:
    """Bytes/token on the eval split per domain for both tokenizers."""
    import sentencepiece as spm

    from tokenizer.evaluate import measure_ours, measure_sentencepiece, select_eval_docs
    from tokenizer.lock import load_locked
    from tokenizer.shards import require_shards

    locked = load_locked(ours_dir)
    docs, source = select_eval_docs(require_shards(shards)[1], locked.lock)
    ours = measure_ours(locked, docs).groups
    sp = measure_sentencepiece(
        spm.SentencePieceProcessor(model_file=str(sp_dir / "sp.model")), docs
    ).groups
    rows = {}
    for key in sorted(k for k in ours if k == "all" or k.startswith("domain=")):
        mine, base = ours[key].figures(), sp[key].figures()
        rows[key] = {
            "ours_bytes_per_token": mine["bytes_per_token"],
            "sentencepiece_bytes_per_token": base["bytes_per_token"],
            "ratio": round(mine["bytes_per_token"] / base["bytes_per_token"], 4),
            "documents": mine["documents"],
        }
    return {"eval_source": source, "compression": rows}


def main(argv: list[str] | None = None) -> None:
    global CORPUS
    parser = argparse.ArgumentParser()
    add_corpus_argument(parser)
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--child", choices=("ours", "sentencepiece"))
    parser.add_argument("--shards")
    parser.add_argument("--out")
    args = parser.parse_args(argv or [])
    if args.child:
        _child(args.child, args.shards, args.out, args.vocab)
        return
    CORPUS = corpus_dir(args.corpus)
    shards = corpus_shards(args.mb)
    run_dir = WORK / f"train-{args.mb:g}mb-{args.vocab}"
    ours = _run_child("ours", shards, run_dir / "ours", args.vocab)
    print(f"ours: {ours}", flush=True)
    sentencepiece = _run_child("sentencepiece", shards, run_dir / "sentencepiece", args.vocab)
    print(f"sentencepiece: {sentencepiece}", flush=True)
    result = compare(shards, run_dir / "ours", run_dir / "sentencepiece")
    from tokenizer.lock import load_locked

    sample = load_locked(run_dir / "ours").lock["sample"]
    overall = result["compression"]["all"]
    domains = {k: v for k, v in result["compression"].items() if k != "all"}
    write_result(
        "tokenizer_train",
        {
            "input_mb": args.mb,
            "sample_bytes": sample["bytes"],
            "vocab_size": args.vocab,
            "cores": os.cpu_count(),
            "ours": ours,
            "sentencepiece": sentencepiece,
            "time_ratio_sentencepiece_over_ours": round(
                sentencepiece["seconds"] / ours["seconds"], 3
            ),
            "cpu_time_ratio_sentencepiece_over_ours": round(
                sentencepiece["cpu_seconds"] / ours["cpu_seconds"], 3
            ),
            "memory_ratio_sentencepiece_over_ours": round(
                sentencepiece["peak_rss_mb"] / ours["peak_rss_mb"], 3
            ),
            **result,
            "target_overall_met": overall["ratio"] >= 1.0,
            "target_per_domain_within_3pct_met": all(v["ratio"] >= 0.97 for v in domains.values()),
        },
    )
    print(
        f"training time: ours {ours['seconds']:.1f} s ({ours['cpu_seconds']:.1f} s CPU) vs "
        f"SentencePiece {sentencepiece['seconds']:.1f} s ({sentencepiece['cpu_seconds']:.1f} s "
        "CPU); compression ratio (ours/SP bytes per token) "
        f"overall {overall['ratio']:.3f}; per domain "
        + ", ".join(f"{k}: {v['ratio']:.3f}" for k, v in domains.items())
    )


if __name__ == "__main__":
    main(sys.argv[1:])
