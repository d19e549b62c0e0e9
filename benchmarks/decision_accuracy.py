"""Decision accuracy of proxy ablations across two proxy scales, on the development corpus.

    python -m benchmarks.decision_accuracy prepare OUT   # corpus -> shards -> tokenizer -> encoded
    python -m benchmarks.decision_accuracy sweep OUT     # `pretrain ablate` with two proxy scales
    python -m benchmarks.decision_accuracy summary OUT   # the decision-accuracy table (JSON)
    python -m benchmarks.decision_accuracy sweep OUT --proxies small --budget-small 1048576
    python -m benchmarks.decision_budgets OUT            # every (proxy, budget) cell run so far

`prepare` writes a `shards` artifact from the corpus's own domain/language labels
(tests.tokenizer.synthetic.write_shards: the data pipeline's tagging is skipped, it costs ~12 CPU-minutes
there), trains a small BPE (vocab 4096, so the output layer does not dominate a 1M-parameter proxy),
encodes, and builds decontaminated eval sets. `sweep` runs one ablation with two proxies over the
same recipes and seeds; its report's `scale_agreement` is the measurement. `--proxies` runs one
proxy at one budget (runs are cached under OUT/ablation-runs, so budgets add up and a later sweep
with both proxies reuses them); `benchmarks.decision_budgets` compares all cells. The corpus is
`--corpus DIR` (or PRETRAIN_CORPUS; BENCHMARKS.md, "Input").
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

from benchmarks.common import add_corpus_argument, corpus_dir

# (file, domain, lang or None = keep the record's) -> mixture components below.
SOURCES = (
    ("en.jsonl.gz", "prose", "en"),
    ("zh.jsonl.gz", "prose", "zh"),
    ("code.jsonl.gz", "code", "en"),
    ("math.jsonl.gz", "math", "en"),
)
MAX_CHARS = 12000
RECIPES = [
    {
        "name": "code-heavy",
        "weights": {"prose_en": 0.3, "prose_zh": 0.1, "code": 0.45, "math": 0.15},
    },
    {
        "name": "prose-heavy",
        "weights": {"prose_en": 0.75, "prose_zh": 0.15, "code": 0.05, "math": 0.05},
    },
    {"name": "zh-heavy", "weights": {"prose_en": 0.3, "prose_zh": 0.5, "code": 0.1, "math": 0.1}},
]
BASE = {"prose_en": 0.5, "prose_zh": 0.2, "code": 0.2, "math": 0.1}
SMALL = {
    "model.num_layers": 2,
    "model.hidden_size": 96,
    "model.num_attention_heads": 4,
    "model.num_query_groups": 2,
    "model.ffn_hidden_size": 256,
}
LARGE = {
    "model.num_layers": 4,
    "model.hidden_size": 192,
    "model.num_attention_heads": 4,
    "model.num_query_groups": 2,
    "model.ffn_hidden_size": 512,
}


def corpus_records(corpus: Path) -> Iterator[dict]:
    for name, domain, lang in SOURCES:
        with gzip.open(corpus / name, "rt", encoding="utf-8") as handle:
            for index, line in enumerate(handle):
                row = json.loads(line)
                text = row["text"][:MAX_CHARS]
                if len(text) < 200:
                    continue
                yield {
                    "id": f"{name.split('.')[0]}-{index:06d}",
                    "text": text,
                    "domain": domain,
                    "lang": lang,
                    "source": row.get("source", name),
                }


def prepare(out: Path, corpus: Path) -> None:
    from evals.sets import EvalBuildConfig, build_eval_sets
    from tests.tokenizer.synthetic import write_shards
    from tokenizer.config import TokenizerTrainConfig
    from tokenizer.encode import encode
    from tokenizer.train import train

    shards = out / "shards"
    if not (shards / "manifest.json").is_file():
        write_shards(
            shards, corpus_records(corpus), docs_per_shard=4000, eval_fraction=0.04, stem="corpus"
        )
    tokenizer = out / "tokenizer"
    if not (tokenizer / "manifest.json").is_file():
        train(
            TokenizerTrainConfig(data=str(shards), out=str(tokenizer), vocab_size=4096),
        )
    encoded = out / "encoded"
    if not (encoded / "manifest.json").is_file():
        encode(tokenizer, shards, encoded, backend="inline")
    evalsets = out / "evalsets"
    if not (evalsets / "manifest.json").is_file():
        build_eval_sets(
            EvalBuildConfig(
                shards=str(shards),
                out=str(evalsets),
                max_docs_per_set=150,
                min_docs_per_set=20,
                max_bytes_per_doc=2000,
            )
        )
    print(f"prepared {out}")


def write_configs(
    out: Path,
    budget_small: int,
    budget_large: int,
    seeds: list[int],
    proxies: tuple[str, ...] = ("small", "large"),
) -> Path:
    mixture = {
        "recipe": {
            "name": "study-base",
            "components": [
                {
                    "name": "prose_en",
                    "select": {"domain": "prose", "lang": "en"},
                    "weight": BASE["prose_en"],
                },
                {
                    "name": "prose_zh",
                    "select": {"domain": "prose", "lang": "zh"},
                    "weight": BASE["prose_zh"],
                },
                {"name": "code", "select": {"domain": "code"}, "weight": BASE["code"]},
                {"name": "math", "select": {"domain": "math"}, "weight": BASE["math"]},
            ],
        },
        "build": {
            "encoded": str(out / "encoded"),
            "tokenizer": str(out / "tokenizer"),
            "total_tokens": budget_large,
            "seq_length": 128,
            "global_batch": 16,
            "seed": 1,
        },
        "out": str(out / "mixture"),
    }
    (out / "mixture.yaml").write_text(yaml.safe_dump(mixture, sort_keys=False))
    repo = Path(__file__).resolve().parent.parent
    common = {
        "model.seq_length": 128,
        "batch.micro_batch_size": 16,
        "batch.global_batch_size": 16,
        "optim.lr": 0.004,
        "metrics.tensorboard": False,
        "guard.enabled": False,
        "model.make_vocab_size_divisible_by": 128,
    }
    ablation = {
        "name": "decision-accuracy",
        "out": str(out / "ablation"),
        "mixture": str(out / "mixture.yaml"),
        "train": str(repo / "configs" / "train_proxy.yaml"),
        "eval_sets": str(out / "evalsets"),
        "variants": RECIPES,
        "proxies": [
            {"name": name, "overrides": {**common, **shape}, "token_budget": budget}
            for name, shape, budget in (
                ("small", SMALL, budget_small),
                ("large", LARGE, budget_large),
            )
            if name in proxies
        ],
        "token_budget": budget_small,
        "seeds": seeds,
        "criteria": {"metric": "bpb", "confidence": 0.9},
        "eval": {"batch_size": 16},
        "parallel": "pool",
        "max_parallel": 2,
        "launch_args": ["--in-process"],
        "timeout_s": 5400,
        # the study measures the recipes it names; training a predicted optimum is item 4's job
        "confirm_predictions": False,
    }
    path = out / "ablation.yaml"
    path.write_text(yaml.safe_dump(ablation, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["prepare", "sweep", "summary"])
    parser.add_argument("out", type=Path)
    add_corpus_argument(parser)
    parser.add_argument("--budget-small", type=int, default=16 * 128 * 100)
    parser.add_argument("--budget-large", type=int, default=16 * 128 * 100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--proxies",
        nargs="+",
        choices=["small", "large"],
        default=["small", "large"],
        help="run only these proxies (their runs are cached: a later sweep with both reuses them)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step == "prepare":
        prepare(args.out, corpus_dir(args.corpus))
        return 0
    if args.step == "sweep":
        from pretrain_app.cli import main as pretrain_main

        config = write_configs(
            args.out, args.budget_small, args.budget_large, args.seeds, tuple(args.proxies)
        )
        return pretrain_main(["ablate", str(config)])
    report = json.loads((args.out / "ablation" / "report.json").read_text())
    json.dump(report.get("scale_agreement"), sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
