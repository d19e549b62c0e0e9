"""`pretrain eval run`'s work: every checkpoint of a run (or one, or an HF export) scored on an
`evalset`; a run's unloadable checkpoint is skipped and listed, a lone or mismatched one refused.
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
from pretrain.storage import write_atomic

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


def _load(checkpoint: Path, tokenizer: Any, args: argparse.Namespace) -> tuple[Any, Any]:
    """(scorer for bpb and our tasks, lm-eval LM or None) of a checkpoint or an HF export."""
    from evals import lm_eval_model

    if export_artifact.is_export(checkpoint):
        hf, hf_tokenizer = lm_eval_model.load_export(checkpoint)
        scorer = lm_eval_model.HFScorer(checkpoint, hf)
        lm = lm_eval_model.hf_lm(hf, hf_tokenizer, args.batch_size) if args.lm_eval else None
        return scorer, lm
    from trainer.inference import load_model

    model = load_model(checkpoint)
    lm = None
    if args.lm_eval:
        lm = lm_eval_model.ProjectLM(model, tokenizer, model.seq_length, args.batch_size)
    return model, lm


def evaluate_checkpoint(
    checkpoint: Path,
    sets: list,
    tokenizer: Any,
    tasks: list[Path],
    args: argparse.Namespace,
    lm_tasks: Any = None,
) -> dict[str, Any]:
    from evals.tasks import evaluate_tasks
    from trainer.evalcore import evaluate

    model, lm = _load(checkpoint, tokenizer, args)
    recorded = getattr(model, "tokenizer_sha256", None)
    if recorded and recorded != tokenizer.sha256:
        raise LockMismatch(
            f"tokenizer mismatch: checkpoint {checkpoint} was trained with "
            f"tokenizer {recorded[:12]}..., --tokenizer is {tokenizer.sha256[:12]}"
            "...; pass the tokenizer the run was trained with"
        )
    seq_length = args.seq_length or getattr(model, "seq_length", None) or 512
    documents: list[dict[str, Any]] = []
    metrics = evaluate(
        model,
        sets,
        encoder=tokenizer,
        seq_length=seq_length,
        batch_size=args.batch_size,
        documents=documents,
    )
    metrics.update(evaluate_tasks(model, tasks, tokenizer, seq_length, args.batch_size))
    if lm_tasks is not None:
        from evals.lm_eval_tasks import run_lm_eval

        metrics.update(run_lm_eval(lm, lm_tasks, args.lm_eval_limit))
    step = int(getattr(model, "step", 0) or 0)
    return {"step": step, "metrics": metrics, "documents": documents}


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


def evaluate_run(
    args: argparse.Namespace, run_dir: Path, checkpoints: list[tuple[int, Path]], out: Path
) -> int:
    """`pretrain eval run` under its output lock: every checkpoint (`find_checkpoints`), then the
    artifact at `out` (`out_dir`)."""
    from evals.lm_eval_tasks import load_lm_eval_tasks
    from evals.plots import plot_capability
    from evals.tasks import load_tasks
    from pretrain.progress import Progress, attach, warn
    from tokenizer.lock import load_locked
    from trainer.evalcore import load_eval_sets

    if args.tasks is not None:
        tasks = [Path(p) for p in args.tasks]
    else:  # the task files the evalset lists (never a file merely present)
        tasks = evalset_artifact.open(args.sets).task_paths()
    load_tasks(tasks)  # every task file, ours and lm-eval's, loads before the first (slow) load
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
            "tasks": [str(t) for t in tasks],
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
