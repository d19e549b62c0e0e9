"""Task evals from local JSONL files (multiple choice, cloze; format: docs/evals.md), scored by
log-likelihood as lm-evaluation-harness scores them; kept for the cloze bits per byte and for
models without logits (the standard tasks run in lm-eval itself: evals/lm_eval_tasks.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pretrain.errors import InputError
from trainer.scoring import LN2, Encoder, Scorer, as_encoder, score_sequences


@dataclass
class Task:
    name: str
    kind: str  # "multiple_choice" | "cloze"
    examples: list[dict[str, Any]]


def _check_example(example: Any, where: str) -> str:
    if not isinstance(example, dict) or not isinstance(example.get("context"), str):
        raise InputError(
            f"{where}: each line must be a JSON object with a string 'context'; "
            "see docs/evals.md for the format"
        )
    if "choices" in example:
        choices, answer = example["choices"], example.get("answer")
        if not (
            isinstance(choices, list)
            and len(choices) >= 2
            and all(isinstance(c, str) and c for c in choices)
        ):
            raise InputError(f"{where}: 'choices' must list at least two non-empty strings")
        if not isinstance(answer, int) or not 0 <= answer < len(choices):
            raise InputError(
                f"{where}: 'answer' = {answer!r} must be the index of the correct "
                f"choice (0..{len(choices) - 1})"
            )
        return "multiple_choice"
    if isinstance(example.get("continuation"), str) and example["continuation"]:
        return "cloze"
    raise InputError(
        f"{where}: an example needs 'choices' + 'answer' (multiple choice) or a "
        "non-empty 'continuation' (cloze)"
    )


def load_task(path: str | Path) -> Task:
    """Read and validate one task file (one kind per file)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(
            f"task file {path} does not exist; pass a JSONL file (format in "
            "docs/evals.md, example in tests/data/evals/)"
        )
    examples, kinds = [], set()
    for number, line in enumerate(_task_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            example = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        kinds.add(_check_example(example, f"{path}:{number}"))
        examples.append(example)
    if not examples:
        raise InputError(f"task file {path} has no examples")
    if len(kinds) > 1:
        raise InputError(f"{path} mixes multiple-choice and cloze examples; use one file per kind")
    return Task(name=path.stem, kind=kinds.pop(), examples=examples)


def load_tasks(paths: Sequence[str | Path]) -> list[Task]:
    """Every task file, loaded; two of one name are refused (their metrics `task/<name>/...`
    and their copies `tasks/<file>` in an eval set would collide)."""
    tasks: list[Task] = []
    for path in paths:
        task = load_task(path)
        first = next((p for p, t in zip(paths, tasks) if t.name == task.name), None)
        if first is not None:
            raise InputError(
                f"task name {task.name!r} comes from both {first} and {path}; rename one file "
                "(its stem names the task's metrics)"
            )
        tasks.append(task)
    return tasks


def _task_text(path: Path) -> str:
    """The file as text: UTF-8, a leading byte order mark (Windows editors) dropped; other bytes
    are one line naming where."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        number = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"{path}:{number}: not UTF-8 (byte {data[exc.start]:#04x} at offset {exc.start}); "
            "save the task file as UTF-8"
        ) from None


def encode_pair(encoder: Encoder, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) as lm-eval's HFLM encodes a log-likelihood request:
    trailing context whitespace moves to the continuation, context + continuation are encoded
    whole and split at the context's length; an empty context is the end-of-document id."""
    if not context:
        return [encoder.eod_id], encoder.encode_batch([continuation])[0]
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole, ctx = encoder.encode_batch([context + continuation, context])
    return ctx, whole[len(ctx) :]


def _continuation_logprobs(
    model: Scorer,
    encoder: Encoder,
    pairs: Sequence[tuple[str, str]],
    seq_length: int,
    batch_size: int,
) -> list[np.ndarray]:
    """Log-prob of every continuation token. A continuation that fits one window is scored after
    the context, left-truncated to fit (as lm-eval's HFLM does); a longer one is scored whole in
    windows of seq_length predictions after the context's last token, as lm-eval's
    `loglikelihood_rolling` scores a document (`get_rolling_token_windows`, context_len 1), so
    every byte a bits-per-byte divides by was scored."""
    sequences, lengths = [], []
    for context, continuation in pairs:
        ctx, cont = encode_pair(encoder, context, continuation)
        ids = (ctx + cont)[-(seq_length + 1) :] if len(cont) <= seq_length else [ctx[-1], *cont]
        sequences.append(ids)
        lengths.append(len(cont))
    scored = score_sequences(model, sequences, seq_length, batch_size, pad_id=encoder.eod_id)
    return [lp[len(lp) - n :] if n else lp[:0] for lp, n in zip(scored, lengths)]


def score_task(
    model: Scorer, task: Task, encoder: Any, seq_length: int = 512, batch_size: int = 8
) -> dict[str, float]:
    """`acc` / `acc_norm` (multiple choice) or `bpb` / `mean_logprob` (cloze), plus `n`."""
    encoder = as_encoder(encoder)
    if task.kind == "multiple_choice":
        pairs = [(ex["context"], choice) for ex in task.examples for choice in ex["choices"]]
    else:
        pairs = [(ex["context"], ex["continuation"]) for ex in task.examples]
    logps = _continuation_logprobs(model, encoder, pairs, seq_length, batch_size)
    if task.kind == "cloze":
        nll = -sum(float(lp.sum(dtype=np.float64)) for lp in logps)
        tokens = sum(len(lp) for lp in logps)
        num_bytes = sum(len(x.encode("utf-8")) for _, x in pairs)
        return {
            "bpb": nll / LN2 / num_bytes,
            "mean_logprob": -nll / max(tokens, 1),
            "n": len(task.examples),
            "n_windowed": sum(len(lp) > seq_length for lp in logps),
        }
    correct = correct_norm = 0
    cursor = 0
    for example in task.examples:
        count = len(example["choices"])
        totals = [float(lp.sum(dtype=np.float64)) for lp in logps[cursor : cursor + count]]
        per_char = [t / max(len(c), 1) for t, c in zip(totals, example["choices"])]
        cursor += count
        correct += int(int(np.argmax(totals)) == example["answer"])
        correct_norm += int(int(np.argmax(per_char)) == example["answer"])
    n = len(task.examples)
    return {"acc": correct / n, "acc_norm": correct_norm / n, "n": n}


def evaluate_tasks(
    model: Scorer, tasks: Sequence[Task], encoder: Any, seq_length: int = 512, batch_size: int = 8
) -> dict[str, float]:
    """Flat metrics `task/<name>/<metric>` for every task."""
    metrics: dict[str, float] = {}
    for task in tasks:
        for key, value in score_task(model, task, encoder, seq_length, batch_size).items():
            metrics[f"task/{task.name}/{key}"] = value if math.isfinite(value) else None
    return metrics
