"""Decision accuracy of proxy ablations across two proxy scales, on the development corpus.

    python -m benchmarks.decision_accuracy prepare OUT   # corpus subset -> the real `pretrain` data
    python -m benchmarks.decision_accuracy sweep OUT     # `pretrain ablate` with two proxy scales
    python -m benchmarks.decision_accuracy gate OUT      # `pretrain launch --dry-run` on the report
    python -m benchmarks.decision_accuracy summary OUT   # small vs large decisions, gate vs large
    python -m benchmarks.decision_accuracy sweep OUT --proxies small --budget-small 1048576
    python -m benchmarks.decision_budgets OUT            # every (proxy, budget) cell run so far

`prepare` takes the first `--docs` documents (>= 200 characters, cut at MAX_CHARS) of the
corpus's en / code / math files and runs the project's own commands on them: `pretrain data run`
(the domain tag taken from the input's `domain` field, `stages.domain.field`; 10% eval split),
`pretrain tokenizer train` (vocab 4096, so the output layer does not dominate a 1M-parameter
proxy), `pretrain tokenizer encode` and `pretrain eval build`. `sweep` runs one ablation with two
proxies over the same recipes and seeds (guard on, unhealthy runs rerun: the gate's defaults);
`gate` builds the chosen mixture and asks `pretrain launch --dry-run` of a `run.kind: full`
config for the gate's verdict. `--proxies` runs one proxy at one budget (runs are cached under
OUT/ablation-runs, so budgets add up and a later sweep with both proxies reuses them);
`benchmarks.decision_budgets` compares all cells. The corpus is `--corpus DIR` (or
PRETRAIN_CORPUS; BENCHMARKS.md, "Input").
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import add_corpus_argument, corpus_dir

REPO = Path(__file__).resolve().parent.parent
GATE_TAGS = ("small", "large", "both")  # which proxies the gated report holds
# corpus file -> documents taken (times --docs); the input's `domain` field (en/code/math) is
# mapped to the mixture's domains by the data job (stages.domain.values).
SOURCES = {"en.jsonl.gz": 2.0, "code.jsonl.gz": 1.0, "math.jsonl.gz": 1.0}
DOMAIN_VALUES = {"en": "prose", "web": "prose"}
MAX_CHARS = 4000
COMPONENTS = ("prose", "code", "math")
BASE = {"prose": 0.6, "code": 0.25, "math": 0.15}
RECIPES = [  # issue 36's three recipes (base is the mixture's)
    {"name": "code-heavy", "weights": {"prose": 0.15, "code": 0.7, "math": 0.15}},
    {"name": "prose-heavy", "weights": {"prose": 0.85, "code": 0.05, "math": 0.1}},
]
COMMON = {  # both proxies, and the gate's dry-run launch (the mixture's batch)
    "model.seq_length": 128,
    "batch.micro_batch_size": 16,
    "batch.global_batch_size": 16,
    "metrics.trackers": [],
    "model.make_vocab_size_divisible_by": 128,
}
SMALL = {
    "model.num_layers": 2,
    "model.hidden_size": 64,
    "model.num_attention_heads": 4,
    "model.num_query_groups": 2,
    "model.ffn_hidden_size": 192,
}
LARGE = {
    "model.num_layers": 4,
    "model.hidden_size": 128,
    "model.num_attention_heads": 4,
    "model.num_query_groups": 2,
    "model.ffn_hidden_size": 384,
}


def pretrain(*args: str) -> None:
    """One `pretrain` command in its own process (its CPU counts in this process's children)."""
    argv = [str(Path(sys.executable).parent / "pretrain"), *args]
    print("$ pretrain " + " ".join(args), flush=True)
    subprocess.run(argv, check=True)


def write_input(out: Path, corpus: Path, docs: int) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, share in SOURCES.items():
        path = out / name.replace(".gz", "")
        with gzip.open(corpus / name, "rt", encoding="utf-8") as src, path.open("w") as dst:
            kept = 0
            for line in src:
                row = json.loads(line)
                if len(row["text"]) < 200:
                    continue
                dst.write(json.dumps({**row, "text": row["text"][:MAX_CHARS]}) + "\n")
                kept += 1
                if kept >= int(docs * share):
                    break
        paths.append(str(path))
    return paths


def _dump(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def prepare(out: Path, corpus: Path, docs: int) -> None:
    inputs = write_input(out / "input", corpus, docs)
    shards, tokenizer = out / "shards", out / "tokenizer"
    encoded, evalsets = out / "encoded", out / "evalsets"
    if not (shards / "manifest.json").is_file():
        pipeline = yaml.safe_load((REPO / "configs" / "pipeline.yaml").read_text())
        pipeline.update(inputs=inputs, output=str(shards), eval_fraction=0.1)
        pipeline["stages"]["domain"] = {"field": "domain", "values": DOMAIN_VALUES}
        pretrain("data", "run", str(_dump(out / "pipeline.yaml", pipeline)))
    if not (tokenizer / "manifest.json").is_file():
        config = yaml.safe_load((REPO / "configs" / "tokenizer.yaml").read_text())
        config.update(data=str(shards), out=str(tokenizer), vocab_size=4096)
        config["sample"]["domain_weights"] = {}
        pretrain("tokenizer", "train", str(_dump(out / "tokenizer.yaml", config)))
    if not (encoded / "manifest.json").is_file():
        pretrain(
            "tokenizer", "encode", str(tokenizer), "--data", str(shards), "--out", str(encoded)
        )
    if not (evalsets / "manifest.json").is_file():
        config = yaml.safe_load((REPO / "configs" / "eval.yaml").read_text())
        config.update(
            shards=str(shards),
            out=str(evalsets),
            tasks=[],
            max_docs_per_set=150,
            min_docs_per_set=20,
            max_bytes_per_doc=2000,
        )
        pretrain("eval", "build", str(_dump(out / "eval.yaml", config)))
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
            "name": "base",
            "components": [
                {"name": c, "select": {"domain": c}, "weight": BASE[c]} for c in COMPONENTS
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
    _dump(out / "mixture.yaml", mixture)
    ablation = {
        "name": "decision-accuracy",
        "out": str(out / "ablation"),
        "mixture": str(out / "mixture.yaml"),
        "train": str(REPO / "configs" / "train_proxy.yaml"),
        "eval_sets": str(out / "evalsets"),
        "variants": RECIPES,
        "proxies": [
            {"name": name, "overrides": {**COMMON, **shape}, "token_budget": budget}
            for name, shape, budget in (
                ("small", SMALL, budget_small),
                ("large", LARGE, budget_large),
            )
            if name in proxies
        ],
        "token_budget": budget_small,
        "seeds": seeds,
        # the gate's defaults otherwise (confidence, scale agreement, health, guard on)
        "criteria": {"metric": "bpb"},
        "eval": {"batch_size": 16},
        "parallel": "pool",
        "max_parallel": 2,
        "launch_args": ["--in-process"],
        "timeout_s": 5400,
        # the study measures the recipes it names; training a predicted optimum is item 4's job
        "confirm_predictions": False,
    }
    return _dump(out / "ablation.yaml", ablation)


def gate(out: Path, tag: str) -> dict[str, Any]:
    """`pretrain launch --dry-run` of a `run.kind: full` proxy config on the chosen recipe's
    mixture against OUT/ablation: the gate's verdict as a launch sees it, kept in
    OUT/gate-TAG.json with a copy of the report it judged."""
    report_dir = out / "ablation"
    report = json.loads((report_dir / "report.json").read_text())
    chosen = yaml.safe_load((report_dir / "chosen_mixture.yaml").read_text())
    chosen["out"] = str(out / f"mixture-{tag}")
    if not (out / f"mixture-{tag}" / "manifest.json").is_file():
        pretrain("mixture", "build", str(_dump(out / f"chosen-{tag}.yaml", chosen)))
    argv = [str(Path(sys.executable).parent / "pretrain"), "launch", "--dry-run"]
    argv += [str(REPO / "configs" / "train_proxy.yaml")]
    for item in (
        "run.kind=full",
        f"run.out_dir={out / f'launch-{tag}'}",
        f"data.mixture_dir={out / f'mixture-{tag}'}",
        f"data.tokenizer_dir={out / 'tokenizer'}",
        f"gate.report_dir={report_dir}",
        *(f"{k}={v}" for k, v in {**COMMON, **LARGE}.items()),
    ):
        argv += ["--set", item]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    lines = (proc.stdout + proc.stderr).splitlines()
    verdict = {
        "tag": tag,
        "returncode": proc.returncode,
        "gate_lines": [line for line in lines if line.startswith(("# gate:", "pretrain launch:"))],
        "headline": report["headline"],
        "verdict": report["verdict"],
        "passed": report["passed"],
        "chosen": report["chosen_recipe_name"],
        "primary_proxy": report["primary_proxy"],
        "ranking": {
            proxy: [(r["recipe_name"], r["mean"], r["std"]) for r in rows]
            for proxy, rows in report["ranking"].items()
        },
        "unhealthy_runs": [(u["run"], u["problems"]) for u in report.get("unhealthy_runs", [])],
        "outliers": [(o["run"], o["value"]) for o in report.get("outliers", [])],
        "warnings": report.get("warnings", []),
    }
    (out / f"gate-{tag}.json").write_text(json.dumps(verdict, indent=1) + "\n")
    (out / f"report-{tag}.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(verdict, indent=1))
    return verdict


def summary(out: Path) -> dict[str, Any]:
    """Small vs large on every pair (winner, flags), each gate's verdict (small-only report,
    large-only report, both scales) and whether the small-only verdict matched the large-only
    one, and the runs left out. Needs `gate --tag small|large|both` after the matching sweeps."""
    gates = {tag: json.loads((out / f"gate-{tag}.json").read_text()) for tag in GATE_TAGS}
    report = json.loads((out / "report-both.json").read_text())
    scale = report["scale_agreement"]
    pairs = [
        {
            "pair": f"{p['a_name']} vs {p['b_name']}",
            "small_winner": p["small_winner_name"],
            "large_winner": p["large_winner_name"],
            "agree": p["small_winner_name"] == p["large_winner_name"],
            "flags": p["flags"],
        }
        for p in scale["pairs"]
    ]
    small, large = gates["small"], gates["large"]
    table = {
        "pairs": pairs,
        "pairs_agree": sum(p["agree"] for p in pairs),
        "n_pairs": len(pairs),
        "gates": {
            tag: {k: g[k] for k in ("verdict", "passed", "chosen", "returncode", "gate_lines")}
            for tag, g in gates.items()
        },
        "small_verdict_matches_large": (small["verdict"], small["passed"])
        == (large["verdict"], large["passed"]),
        "small_choice_is_large_first": small["chosen"] == large["ranking"]["large"][0][0],
        "ranking": gates["both"]["ranking"],
        "runs": len(report["runs"]),
        "unhealthy": gates["both"]["unhealthy_runs"],
        "outliers": gates["both"]["outliers"],
        "warnings": gates["both"]["warnings"],
    }
    (out / "summary.json").write_text(json.dumps(table, indent=1) + "\n")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["prepare", "sweep", "gate", "summary"])
    parser.add_argument("out", type=Path)
    add_corpus_argument(parser)
    parser.add_argument("--docs", type=int, default=900, help="documents per corpus file share")
    parser.add_argument("--budget-small", type=int, default=16 * 128 * 96)
    parser.add_argument("--budget-large", type=int, default=16 * 128 * 96)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--proxies",
        nargs="+",
        choices=["small", "large"],
        default=["small", "large"],
        help="run only these proxies (their runs are cached: a later sweep with both reuses them)",
    )
    parser.add_argument(
        "--tag", choices=GATE_TAGS, default="both", help="gate: the report's proxies"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step == "prepare":
        prepare(args.out, corpus_dir(args.corpus), args.docs)
        return 0
    if args.step == "sweep":
        from pretrain_app.cli import main as pretrain_main

        config = write_configs(
            args.out, args.budget_small, args.budget_large, args.seeds, tuple(args.proxies)
        )
        return pretrain_main(["ablate", str(config)])
    if args.step == "gate":
        gate(args.out, args.tag)
        return 0
    json.dump(summary(args.out), sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
