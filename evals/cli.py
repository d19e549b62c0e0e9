"""`pretrain ablate` and `pretrain eval ...`: each command's handler (a callable taking the parsed
arguments, returning the exit status; heavy imports inside), what `pretrain ablate` prints
(`print_report`) and `register`."""

from __future__ import annotations

import argparse
from typing import Any

from pretrain.cli_utils import add_command, add_config_args, positive_int


def ablate(args: argparse.Namespace) -> int:
    """`pretrain ablate CONFIG`: proxy runs of mixture recipes and the decision report."""
    from evals.ablate import AblationConfig
    from evals.sweep import preflight, run_sweep
    from pretrain.cli_utils import resolve_config

    config = resolve_config(AblationConfig, args, preflight)
    if config is not None:
        print_report(run_sweep(config), config.out)
    return 0


def _print_ranking(report: dict[str, Any]) -> None:
    """Per proxy: overall metric over seeds, then bpb per domain (± interval half-width);
    * marks the Pareto front over domains."""
    metric = report["target_metric"]
    domains = report.get("domains") or {}
    for proxy, rows in report["ranking"].items():
        table = {row["recipe_sha256"]: row for row in domains.get(proxy, [])}
        names = sorted({d for row in table.values() for d in row["domains"]})
        print(f"{proxy}: {metric} mean ± std over seeds | bpb per domain ± interval (* Pareto)")
        if names:
            print(f"  {'':<25} {'':<24} " + " ".join(f"{n:>15}" for n in names))
        for row in rows:
            std = f"{row['std']:.4f}" if row["std"] is not None else "n/a"
            entry = table.get(row["recipe_sha256"], {"domains": {}, "pareto": False})
            cells = []
            for name in names:
                cell = entry["domains"].get(name)
                half = (cell["upper"] - cell["lower"]) / 2 if cell else 0.0
                cells.append(f"{cell['effect']:>8.4f}±{half:.3f}" if cell else f"{'-':>15}")
            mark = "*" if entry["pareto"] else " "
            print(
                f"  {row['rank']:>2}.{mark}{row['recipe_name']:<20} {row['mean']:.4f} ± {std} "
                f"({row['n_seeds']} seeds) " + " ".join(cells)
            )


def _print_scales(report: dict[str, Any]) -> None:
    if report["rank_agreement"]:
        print(f"rank agreement (Spearman): {report['rank_agreement'].get('spearman')}")
    scale = report.get("scale_agreement")
    if not scale or not scale["pairs"]:
        return
    small, large = scale["proxies"]
    accuracy = scale["accuracy"]
    print(
        f"decision accuracy {small} -> {large}: {accuracy:.0%} of {scale['n_pairs']} pairs agree; "
        f"{scale['n_small_inside_noise']} small-scale margin(s) inside the noise; seed sd "
        + ", ".join(
            f"{p} {n['seed_sd_median']:.4f}" if n["seed_sd_median"] is not None else f"{p} n/a"
            for p, n in scale["noise"].items()
        )
    )
    for pair in scale["pairs"]:
        if pair["flags"]:
            print(
                f"  ! {pair['a_name']} vs {pair['b_name']}: {small} picks "
                f"{pair['small_winner_name']}, {large} picks {pair['large_winner_name']} "
                f"({'; '.join(pair['flags'])})"
            )


def _print_regression(report: dict[str, Any]) -> None:
    regression = report["regression"]
    if regression.get("status") != "fitted":
        return
    best = regression["predicted_best"]
    fit = regression["models"][regression["selected_model"]]
    print(
        f"regression ({regression['selected_model']}, CV R2 {fit['cv_r2']}): predicted best "
        f"{best['predicted']:.4f} at "
        + ", ".join(f"{k} {v:.3f}" for k, v in best["weights"].items())
    )
    for row in report.get("predictions") or []:
        measured = "not run" if row.get("measured") is None else f"{row['measured']:.4f}"
        print(f"  predicted {row['predicted']:.4f}, measured {measured} ({row['recipe_name']})")


def _print_evidence_flags(report: dict[str, Any]) -> None:
    """Unhealthy runs, seed outliers (with the rule) and small eval sets, each on its line."""
    from trainer.gate_rule import OUTLIER_RULE

    for row in report.get("unhealthy_runs", []):
        print(
            f"  ! unhealthy, left out: {row['run']}: {'; '.join(row['problems'])} "
            f"(ended: {row['ended']}, rollbacks {row['rollbacks']}, skipped batches "
            f"{row['skipped_batches']})"
        )
    for row in report.get("outliers", []):
        print(
            f"  ! seed outlier: {row['run']}: {row['value']:.4f} against its recipe's median "
            f"{row['recipe_median']:.4f} (modified z {row['modified_z']}; rule: {OUTLIER_RULE})"
        )
    for line in report.get("warnings", []):
        print(f"  ! {line}")


def print_report(report: dict[str, Any], out: str) -> None:
    """The decision's top line, then the ranking, trade-offs, agreement, regression, the
    decision's evidence and epoch flags."""
    print(report["headline"])
    _print_evidence_flags(report)
    _print_ranking(report)
    _print_scales(report)
    _print_regression(report)
    flags = report["epoch_flags"]
    verdict = "PASSED" if report["passed"] else "NOT PASSED"
    print(
        f"chosen recipe: {report['chosen_recipe_name']} ({report['chosen_recipe_sha256'][:12]})"
        f"; {report['decision']['verdict']}; criteria {verdict}"
    )
    for line in report["decision"]["evidence"]:
        print(f"  - {line}")
    for flag in flags[:5]:
        print(f"  ! {flag}")
    if len(flags) > 5:
        print(f"  ! ... {len(flags) - 5} more epoch flags in report.json")
    print(
        f"-> {out} (report.json, ranking.png; chosen_mixture.yaml rebuilds the chosen "
        "recipe for the full run)"
    )


def _build_preflight(config: Any) -> str:
    from evals.sets import preflight

    return f"{len(preflight(config))} shard files verified; out is free"


def eval_build(args: argparse.Namespace) -> int:
    """`pretrain eval build CONFIG`: decontaminated eval sets from the eval split."""
    from pathlib import Path

    from evals.sets import EvalBuildConfig, build_eval_sets
    from pretrain.cli_utils import resolve_config
    from pretrain.manifest import manifest_sha256

    config = resolve_config(EvalBuildConfig, args, _build_preflight)
    if config is None:
        return 0
    manifest = build_eval_sets(config)
    for entry in manifest["sets"]:
        print(
            f"  {entry['name']:<24} {entry['documents']:>6} documents {entry['bytes']:>10,} bytes"
        )
    for task in manifest["tasks"]:
        print(
            f"  task {task['name']:<19} {task['contaminated_examples']:>6} of {task['examples']} "
            f"examples in {task['contaminated_train_documents']} training document(s)"
        )
    counts = manifest["counts"]
    print(
        f"eval sets: {counts['sets']} sets, {counts['documents']} documents; "
        f"{counts['contaminated_train_documents']} contaminated training document(s) listed in "
        f"{Path(config.out) / 'contaminated.parquet'} (excluded from training)"
    )
    print(f"-> {config.out} (evalset {manifest_sha256(config.out)[:12]})")
    return 0


def eval_run(args: argparse.Namespace) -> int:
    """`pretrain eval run CHECKPOINT_DIR --sets DIR`: bits per byte and tasks of checkpoints."""
    from evals.commands import evaluate_run, find_checkpoints, out_dir
    from pretrain.artifacts import eval_results as eval_artifact
    from pretrain.locking import output_lock
    from pretrain.output_check import require_own_output

    run_dir, checkpoints = find_checkpoints(args.checkpoint_dir)
    out = out_dir(args, run_dir)
    # before any set or checkpoint is loaded: never results.jsonl over someone else's files
    require_own_output(out, "--out", eval_artifact.KIND)
    with output_lock(out):
        return evaluate_run(args, run_dir, checkpoints, out)


def eval_lm_eval(args: argparse.Namespace) -> int:
    """`pretrain eval lm-eval CHECKPOINT [LM_EVAL_ARGS...]`: lm-evaluation-harness's own `run`
    with the checkpoint as `--model pretrain` (lm-eval finds models only in its own registry)."""
    import sys
    from pathlib import Path

    import lm_eval.models  # noqa: F401  (lm-eval's own: it fills its registry only when empty)
    from lm_eval.__main__ import cli_evaluate
    from lm_eval.api.registry import register_model

    from evals.commands import find_tokenizer
    from evals.lm_eval_model import CheckpointLM

    register_model("pretrain")(CheckpointLM)
    tokenizer = args.tokenizer or find_tokenizer(Path(args.checkpoint).parent.parent)
    model_args = f"checkpoint={args.checkpoint},tokenizer={tokenizer}"
    argv, sys.argv = sys.argv, ["lm_eval", "run", "--model", "pretrain", "--model_args"]
    sys.argv += [model_args, *args.lm_eval_args]
    try:
        cli_evaluate()
    finally:
        sys.argv = argv
    return 0


def register(sub: Any) -> None:
    ablate_parser = add_command(
        sub,
        ["ablate"],
        ablate,
        "sweep mixture recipes on proxy models and write a decision report",
    )
    add_config_args(ablate_parser)
    ev = sub.add_parser("eval", help="build eval sets and evaluate checkpoints")
    esub = ev.add_subparsers(dest="eval_command", metavar="EVAL_COMMAND", required=True)
    build = add_command(
        esub,
        ["eval", "build"],
        eval_build,
        "build decontaminated eval sets from the eval split",
    )
    add_config_args(build)
    run = add_command(
        esub,
        ["eval", "run"],
        eval_run,
        "evaluate a checkpoint on eval sets (bits per byte, tasks)",
    )
    run.add_argument(
        "checkpoint_dir",
        metavar="CHECKPOINT_DIR",
        help="a run directory (every checkpoint: capability curve) or one "
        "checkpoints/iter_NNNNNNN directory",
    )
    run.add_argument("--sets", required=True, metavar="DIR", help="an evalset artifact")
    run.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="tokenizer artifact (default: found through the run's lineage)",
    )
    run.add_argument(
        "--tasks",
        nargs="*",
        default=None,
        metavar="JSONL",
        help="task files (default: the eval set's tasks/)",
    )
    run.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="where results go (default: CHECKPOINT_DIR/evals)",
    )
    run.add_argument(
        "--lm-eval",
        nargs="+",
        default=None,
        metavar="NAME=FILE",
        help="lm-evaluation-harness tasks on local files: boolq, piqa, hellaswag, arc_easy, "
        "arc_challenge, lambada_openai (or TASK.yaml) = a .jsonl/.json/.parquet file in the "
        "task's published format",
    )
    run.add_argument("--num-fewshot", type=int, default=None, help="lm-eval few-shot examples")
    run.add_argument(
        "--lm-eval-limit", type=positive_int, default=None, help="lm-eval documents per task (cap)"
    )
    run.add_argument("--max-docs", type=positive_int, default=None, help="documents per set (cap)")
    run.add_argument("--batch-size", type=positive_int, default=8)
    run.add_argument(
        "--seq-length",
        type=positive_int,
        default=None,
        help="tokens per window (default: the model's sequence length)",
    )
    lm_eval = add_command(
        esub,
        ["eval", "lm-eval"],
        eval_lm_eval,
        "lm-evaluation-harness's own command line with a checkpoint as its model",
    )
    lm_eval.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="tokenizer artifact (default: found through the run's lineage); before CHECKPOINT",
    )
    lm_eval.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoints/iter_NNNNNNN dir")
    lm_eval.add_argument(
        "lm_eval_args",
        nargs=argparse.REMAINDER,
        metavar="LM_EVAL_ARGS",
        help="`lm_eval run` arguments but --model/--model_args: --tasks, --include_path, ...",
    )
