"""Every benchmark claim, one short spec each (benchmarks/harness.py runs them; BENCHMARKS.md has
the table). `{corpus}` is the development corpus, `{work}` the claim's scratch directory, `{out}`
the contender's output directory, `{size}` the claim's full size or, in a smoke run, a tiny one.

A claim with one contender compares inside its own process (the script runs ours and the peer
side by side and reports `target_met`); a claim with several runs each in its own process under
the same measures and states the ratio of one figure between two of them.
"""

from __future__ import annotations

from benchmarks.harness import Claim, Contender


def _script(module: str, *args: str) -> tuple[Contender, ...]:
    return (Contender("script", ("-m", f"benchmarks.{module}", *args)),)


def _same_tokens(reported: dict[str, dict]) -> str | None:
    counts = {name: r.get("tokens") for name, r in reported.items()}
    return None if len(set(counts.values())) == 1 else f"token counts {counts}"


def _same_documents(reported: dict[str, dict]) -> str | None:
    counts = {name: r.get("documents_in") for name, r in reported.items()}
    return None if len(set(counts.values())) == 1 else f"documents read {counts}"


ENCODE = ("-m", "benchmarks.bench_tokenizer_encode", "--shards", "{work}/shards")
ENCODE_TOK = ("--tokenizer", "{work}/tokenizer", "--out", "{out}")

CLAIMS: tuple[Claim, ...] = (
    Claim(
        "encode",
        "`pretrain tokenizer encode` (default Ray path) CPU within 10% of a plain "
        "encode_batch_fast + numpy writer; same tokens as datatrove and Megatron's loop",
        prepare=("-m", "benchmarks.bench_tokenizer_encode", "--prepare", "{work}", "{size}"),
        contenders=tuple(
            Contender(kind, (*ENCODE, "--child", kind, *ENCODE_TOK))
            for kind in ("ours", "no_ray", "floor", "datatrove", "megatron_loop")
        ),
        size="--corpus {corpus} --mb 30",
        smoke_size="--corpus {corpus} --mb 0.3",
        ratio=("cpu_s", "ours", "floor"),
        target=1 / 1.1,
        check=_same_tokens,
    ),
    Claim(
        "tokenizer_train",
        "our byte-level BPE vs SentencePiece BPE on the same sample: compression, time, memory",
        _script("bench_tokenizer_train", "--corpus", "{corpus}", "{size}"),
        size="--mb 100 --vocab 32768",
        smoke_size="--mb 0.3 --vocab 512",
    ),
    Claim(
        "rules",
        "rule signals >= 3x datatrove's Gopher/C4/FineWeb filters; >= 99% keep/drop agreement",
        _script("bench_rules", "--corpus", "{corpus}", "{size}"),
        size="--docs 5000 --workers 1",
        smoke_size="--docs 20 --workers 1",
    ),
    Claim(
        "pii",
        "PII: precision/recall on the labelled set; redaction >= 1x datatrove's PIIFormatter",
        _script("bench_pii", "--corpus", "{corpus}", "{size}"),
        size="--docs 5000",
        smoke_size="--docs 20",
    ),
    Claim(
        "pii_multilingual",
        "PII in en/de/fr/es/zh, phones by lang: recall and precision before vs after",
        _script("bench_pii_multilingual", "--corpus", "{corpus}", "{size}"),
        size="--docs 2000",
        smoke_size="--docs 20",
    ),
    Claim(
        "pipeline",
        "whole WARC pipeline vs datatrove (WarcReader -> Trafilatura -> filters), same workers",
        _script("bench_pipeline", "--corpus", "{corpus}", "{size}"),
        size="--limit 480",
        smoke_size="--limit 8 --workers 1 --skip-memory",
    ),
    Claim(
        "warc_read",
        "WARC reading through warcio: read_unit's CPU <= 2x warcio alone; warcio and FastWARC "
        "read the same records",
        _script("bench_warc_read", "--corpus", "{corpus}", "{size}"),
        size="--repeat 3",
        smoke_size="--repeat 1",
    ),
    Claim(
        "data_overhead",
        "the data job's CPU outside its stages (whole process tree minus the manifest's stage "
        "CPU) on the corpus's WARC: at most half of c166a0c's 15.5 CPU-s",
        _script("bench_data_overhead", "--corpus", "{corpus}", "{size}"),
    ),
    Claim(
        "pipeline_scaling",
        "data job 1 -> 2 workers, start-up excluded: >= 0.85",
        _script("bench_pipeline_scaling", "--corpus", "{corpus}", "{size}"),
        size="--pages 10000 --runs ours",
        smoke_size="--pages 16 --files 2 --runs ours --workers 2",  # one fresh Ray, not two
    ),
    Claim(
        "perplexity",
        "perplexity scoring docs/s per core >= datatrove's FineWebQualityFilter",
        _script("bench_perplexity", "--corpus", "{corpus}", "{size}"),
        size="--docs 300",
        smoke_size="--docs 10 --max-tokens 20000",
    ),
    Claim(
        "perplexity_memory",
        "perplexity's global stage at 1x/4x/16x input: worker and driver memory bounded",
        _script("bench_perplexity_memory", "--corpus", "{corpus}", "{size}"),
        size="--max-tokens 2000000",
        smoke_size="--docs 20 --max-tokens 20000",
    ),
    Claim(
        "minhash",
        "shingling + MinHash signatures >= 3x datasketch, >= 1.5x datatrove, one core",
        _script("bench_minhash", "--corpus", "{corpus}", "{size}"),
        size="--docs 100000",
        smoke_size="--docs 50",
    ),
    Claim(
        "small_files",
        "10,000 one-document files: `pretrain data run` (extract + langid) docs/s, start-up apart, "
        ">= 0.5x datatrove JsonlReader -> JsonlWriter on the same directory",
        prepare=("-m", "benchmarks.bench_small_files", "--prepare", "{work}", "{size}"),
        contenders=tuple(
            Contender(
                kind, ("-m", "benchmarks.bench_small_files", "--child", kind, "{work}", "{out}")
            )
            for kind in ("ours", "datatrove")
        ),
        size="--corpus {corpus} --files 10000",
        smoke_size="--corpus {corpus} --files 80",
        ratio=("docs_per_s", "ours", "datatrove"),
        target=0.5,
        check=_same_documents,
    ),
    Claim(
        "dedup_job",
        "the near-dup job (`pretrain data run`: extract + dedup, whole process tree with Ray) "
        "at or below datasketch MinHashLSH's CPU and memory on the same documents",
        prepare=("-m", "benchmarks.dedup_baseline", "--prepare", "{work}", "{corpus}", "{size}"),
        contenders=(
            Contender("ours", ("-m", "pretrain_app", "data", "run", "{work}/job.json", "-q")),
            Contender("datasketch", ("-m", "benchmarks.dedup_baseline", "{work}/input")),
        ),
        size="12465",
        smoke_size="60",
        ratio=("cpu_s", "ours", "datasketch"),
        target=1.0,
    ),
    Claim(
        "dedup",
        "end-to-end near-dup dedup on Ray vs datatrove's four-stage MinHash, 2 workers",
        _script("bench_dedup", "--corpus", "{corpus}", "{size}"),
        size="--docs 100000",
        smoke_size="--docs 200",
    ),
    Claim(
        "dedup_memory",
        "near-dup job CPU and memory per additional document <= datasketch MinHashLSH's",
        _script("bench_dedup_memory", "--corpus", "{corpus}", "{size}"),
        size="--docs 1000 --budget-mb 512",
        smoke_size="--docs 40 --scales 1,2",
    ),
    Claim(
        "dedup_quality",
        "verified near-dup pairs at J >= 0.8: precision and recall >= 0.95 vs exact Jaccard",
        _script("dedup_quality", "--corpus", "{corpus}"),
    ),
    Claim(
        "decontamination",
        "eval decontamination via the dedup index >= 1x datasketch MinHashLSH",
        _script("bench_decontamination", "--corpus", "{corpus}"),
    ),
    Claim(
        "ray_footprint",
        "the `cluster` extra (ray[default]) costs an embedded run <= 5% RSS, no process; pass "
        "a plain-ray interpreter as --python too (the script's docstring)",
        _script("bench_ray_footprint", "{size}"),
        size="--repeat 3",
        smoke_size="--repeat 1 --settle-s 0.5",
    ),
    Claim(
        "estimate",
        "`pretrain data estimate` against published throughput figures",
        _script("bench_estimate", "--corpus", "{corpus}", "{size}"),
        size="--docs 6000",
        smoke_size="--docs 40",
    ),
    Claim(
        "driver_scale",
        "the data job's driver at 1k-100k parts: CPU per part of its own bookkeeping",
        _script("bench_driver_scale", "{size}"),
        size="--parts 1000 10000 100000",
        smoke_size="--parts 20 --s3-parts 10 --identity-inputs 5",
    ),
    Claim(
        "mixture_deviation",
        "every aligned global batch within 1 sequence of quota (vs Megatron-Core blending)",
        _script("bench_mixture_deviation"),
    ),
    Claim(
        "mixture_index",
        "sample index for 10^8 sequences: the speed and memory of Megatron-Core's C++ builder",
        _script("bench_mixture_index", "{size}"),
        size="--sequences 100000000",
        smoke_size="--sequences 100000",
    ),
    Claim(
        "trainer_cpu",
        "Megatron-Core stack on CPU vs a plain-PyTorch GPT of the same shape",
        _script("bench_trainer_cpu", "{size}"),
        size="--rounds 8 --steps 3",
        smoke_size="--rounds 1 --steps 1",
    ),
    Claim(
        "plan_memory",
        "`pretrain plan`'s model-state memory per rank within 15% of Megatron-Core's",
        _script("bench_plan_memory", "{size}"),
        smoke_size=None,  # its --quick run is tests/trainer/test_plan_memory_measured.py (slow)
    ),
    Claim(
        "verify_cache",
        "launch's byte check of a 1 GiB encoded set with the hash cache vs a full re-hash",
        _script("bench_verify_cache", "{size}"),
        size="--mib 1024",
        smoke_size="--mib 4 --prefixes 2",
    ),
    Claim(
        "sweep_parallel",
        "walkthrough sweep, 2 proxy runs side by side vs 1 at a time: wall time",
        _script("bench_sweep_parallel", "{work}/walk", "{size}"),
        prepare=("-m", "benchmarks.bench_sweep_parallel", "prepare", "{work}/walk"),
        smoke_size=None,
    ),
    Claim(
        "decision_accuracy",
        "decision accuracy between two proxy scales (3 recipes x 3 seeds, the gate on each)",
        _script("decision_accuracy", "sweep", "{work}/decision", "--corpus", "{corpus}"),
        prepare=(
            "-m",
            "benchmarks.decision_accuracy",
            "prepare",
            "{work}/decision",
            "--corpus",
            "{corpus}",
        ),
        smoke_size=None,
    ),
    Claim(
        "gpu_trainer",
        "our stack (GPU fast path) vs plain PyTorch bf16 on one H100/H200: MFU",
        _script("gpu_trainer", "{size}"),
        smoke_size="--dry-run --rounds 1 --steps 1 --warmup 1",
        gpu=True,
    ),
)
