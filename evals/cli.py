"""`pretrain ablate` and `pretrain eval ...`: each command's handler (parsed arguments in, exit
status out; heavy imports inside), `eval run`'s work, and `register`.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from pretrain.artifacts import eval_results as eval_artifact
from pretrain.artifacts import evalset as evalset_artifact
from pretrain.artifacts import export as export_artifact
from pretrain.artifacts.base import write_artifact
from pretrain.errors import ArtifactError, LockMismatch
from pretrain.manifest import manifest_sha256
from pretrain.program import add_command, add_config_args, positive_int, resolve_config
from pretrain.storage import write_atomic


def ablate(args: argparse.Namespace) -> int:
    """`pretrain ablate CONFIG`: proxy runs of mixture recipes and the decision report."""
    from evals.ablation_plan import AblationConfig
    from evals.ablation_run import preflight, run_sweep
    from evals.report import print_report

    config = resolve_config(AblationConfig, args, preflight)
    if config is not None:
        print_report(run_sweep(config), config.out)
    return 0


def _build_preflight(config: Any) -> str:
    from evals.sets import preflight

    return f"{len(preflight(config))} shard files verified; out is free"


def eval_build(args: argparse.Namespace) -> int:
    """`pretrain eval build CONFIG`: decontaminated eval sets from the eval split."""
    from evals.sets import EvalBuildConfig, build_eval_sets

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


ITER = re.compile(r"^iter_(\d+)$")


def find_checkpoints(path: str | Path) -> tuple[Path, list[tuple[int, Path]]]:
    """(run directory, [(step, checkpoint dir)] ascending) for a run, one checkpoint dir or an
    HF export (its own directory, at the exported step)."""
    from trainer.checkpoint import list_checkpoints

    path = Path(path)
    if export_artifact.is_export(path):
        return path, [(export_artifact.open(path).step, path)]
    match = ITER.match(path.name)
    if match and path.is_dir():
        return path.parent.parent, [(int(match.group(1)), path)]
    found = list_checkpoints(path)
    if not found:
        raise ArtifactError(
            f"CHECKPOINT_DIR = {path} holds no checkpoints/iter_NNNNNNN; pass a "
            "run directory of `pretrain launch` or one of its checkpoints"
        )
    return path, found


def find_tokenizer(run_dir: Path) -> Path:
    """The tokenizer artifact in the lineage of a run or an HF export (the trainer's walk)."""
    from trainer.data import lineage_tokenizer

    found = lineage_tokenizer(run_dir)
    if found is None:
        raise ArtifactError(
            f"no tokenizer artifact found in the lineage of {run_dir}; pass --tokenizer "
            "TOKENIZER_DIR"
        )
    return found


def evaluate_checkpoint(
    checkpoint: Path,
    sets: list,
    tokenizer: Any,
    tasks: list[Any],
    args: argparse.Namespace,
    lm_tasks: Any = None,
) -> dict[str, Any]:
    """Metrics and per-document NLL of a checkpoint or an HF export (lm-eval's own HFLM for it)."""
    from evals import lm_eval_model
    from evals.lm_eval_tasks import run_lm_eval
    from evals.tasks import evaluate_tasks
    from trainer.inference import load_model
    from trainer.scoring import evaluate

    model: Any
    export = export_artifact.is_export(checkpoint)
    if export:
        hf, hf_tokenizer = lm_eval_model.load_export(checkpoint)
        model = lm_eval_model.HFScorer(checkpoint, hf)
    else:
        model = load_model(checkpoint)
    recorded = model.tokenizer_sha256
    if recorded and recorded != tokenizer.sha256:
        raise LockMismatch(
            f"tokenizer mismatch: checkpoint {checkpoint} was trained with "
            f"tokenizer {recorded[:12]}..., --tokenizer is {tokenizer.sha256[:12]}"
            "...; pass the tokenizer the run was trained with"
        )
    size, documents = args.batch_size, list[dict[str, Any]]()
    metrics = evaluate(model, sets, tokenizer, model.seq_length, size, documents=documents)
    metrics.update(evaluate_tasks(model, tasks, tokenizer, model.seq_length, size))
    if lm_tasks is not None:
        if export:
            lm = lm_eval_model.hf_lm(hf, hf_tokenizer, size)
        else:
            lm = lm_eval_model.ProjectLM(model, tokenizer, model.seq_length, size)
        metrics.update(run_lm_eval(lm, lm_tasks))
    return {"step": model.step, "metrics": metrics, "documents": documents}


def write_documents(records: list[dict[str, Any]], path: Path) -> None:
    """documents.parquet: per checkpoint and eval document, its NLL (nats), bytes and tokens."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"step": r["step"], **doc} for r in records for doc in r["documents"]]
    table = pa.Table.from_pylist(rows) if rows else pa.table({"step": pa.array([], pa.int64())})
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def out_dir(args: argparse.Namespace, run_dir: Path) -> Path:
    """--out, else RUN/evals (an export's results go beside it, never into the artifact)."""
    if args.out:
        return Path(args.out)
    if export_artifact.is_export(run_dir):
        return run_dir.with_name(run_dir.name + "-evals")
    return run_dir / "evals"


def eval_run(args: argparse.Namespace) -> int:
    """`pretrain eval run CHECKPOINT_DIR --sets DIR`: bits per byte and tasks of checkpoints;
    results.jsonl, documents.parquet, capability.png and an `eval` manifest in `out_dir`."""
    from pretrain.locking import output_lock
    from pretrain.output_check import require_own_output

    run_dir, checkpoints = find_checkpoints(args.checkpoint_dir)
    out = out_dir(args, run_dir)
    # before any set or checkpoint is loaded: never results.jsonl over someone else's files
    require_own_output(out, "--out", eval_artifact.KIND)
    with output_lock(out):
        return _evaluate_run(args, run_dir, checkpoints, out)


def _evaluate_run(
    args: argparse.Namespace, run_dir: Path, checkpoints: list[tuple[int, Path]], out: Path
) -> int:
    from evals.lm_eval_tasks import load_lm_eval_tasks
    from evals.plots import plot_capability
    from evals.tasks import load_tasks
    from pretrain.progress import Progress, attach, warn
    from tokenizer.lock import load_locked
    from trainer.scoring import load_eval_sets

    if args.tasks is not None:
        task_paths = [Path(p) for p in args.tasks]
    else:  # the task files the evalset lists (never a file merely present)
        task_paths = evalset_artifact.open(args.sets).task_paths()
    # every task file, ours and lm-eval's, loads before the first (slow) checkpoint load
    tasks = load_tasks(task_paths)
    lm_tasks = load_lm_eval_tasks(args.lm_eval, args.num_fewshot) if args.lm_eval else None
    sets = load_eval_sets(args.sets, args.max_docs)
    tokenizer = load_locked(args.tokenizer or find_tokenizer(run_dir))
    out.mkdir(parents=True, exist_ok=True)
    attach(out)
    identity = {"evalset_sha256": manifest_sha256(args.sets), "tokenizer_sha256": tokenizer.sha256}
    records, skipped = [], []
    for step, checkpoint in Progress(checkpoints, desc="eval", unit="checkpoint"):
        try:
            record = evaluate_checkpoint(checkpoint, sets, tokenizer, tasks, args, lm_tasks)
        except ArtifactError as exc:
            if len(checkpoints) == 1 or isinstance(exc, LockMismatch):
                raise  # one checkpoint named, or a mismatch every checkpoint would hit
            skipped.append({"step": step, "checkpoint": str(checkpoint), "reason": str(exc)})
            warn(f"eval: checkpoint {checkpoint.name} skipped (not loadable): {exc}")
            continue
        record.update({"step": record["step"] or step, "checkpoint": str(checkpoint), **identity})
        for doc in record["documents"]:
            doc["step"] = record["step"]
        records.append(record)
        metrics = record["metrics"]
        print(
            f"step {record['step']:>7}: bpb {metrics['bpb']:.4f} loss {metrics['loss']:.4f} "
            f"ppl {metrics['ppl']:.2f}"
        )
    if not records:
        raise ArtifactError(
            f"none of the {len(checkpoints)} checkpoints of {run_dir} could be loaded (first: "
            f"{skipped[0]['reason']}); check them with `pretrain verify CHECKPOINT`"
        )
    write_documents(records, out / "documents.parquet")
    lines = "".join(
        json.dumps({k: v for k, v in r.items() if k != "documents"}, sort_keys=True) + "\n"
        for r in records
    )
    write_atomic(out / "results.jsonl", lines.encode())
    plot_capability(records, out / "capability.png")
    write_artifact(
        out,
        eval_artifact.EvalFields(
            **identity, final=records[-1]["metrics"], skipped_checkpoints=skipped
        ),
        config={
            "sets": str(args.sets),
            "tasks": [str(t) for t in task_paths],
            "lm_eval": lm_tasks.files if lm_tasks else {},
            "num_fewshot": args.num_fewshot,
        },
        # the run evaluated is an ancestor too (when it has a manifest: a finished run)
        inputs=[args.sets] + ([run_dir] if (run_dir / "manifest.json").is_file() else []),
        counts={"checkpoints": len(records), "skipped_checkpoints": len(skipped)},
    )
    print(f"-> {out / 'results.jsonl'}, {out / 'documents.parquet'}, {out / 'capability.png'}")
    if skipped:
        names = ", ".join(Path(entry["checkpoint"]).name for entry in skipped)
        warn(f"eval: {len(skipped)} checkpoint(s) skipped, not loadable: {names}")
    return 0


def eval_lm_eval(args: argparse.Namespace) -> int:
    """`pretrain eval lm-eval CHECKPOINT [LM_EVAL_ARGS...]`: lm-evaluation-harness's own `run`
    with the checkpoint as `--model pretrain` (lm-eval finds models only in its own registry)."""
    import sys

    import lm_eval.models  # noqa: F401  (lm-eval's own: it fills its registry only when empty)
    from lm_eval.__main__ import cli_evaluate
    from lm_eval.api.registry import register_model

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
    run.add_argument("--max-docs", type=positive_int, default=None, help="documents per set (cap)")
    run.add_argument("--batch-size", type=positive_int, default=8)
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
