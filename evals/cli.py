"""`pretrain ablate` and `pretrain eval ...`."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from pretrain.cli_utils import add_command, add_config_args


def _lazy(ref: str) -> Any:
    """A handler importing `module:function` only when the command runs (keeps --help fast)."""

    def handler(args: argparse.Namespace) -> int:
        module_name, _, func_name = ref.partition(":")
        return int(getattr(importlib.import_module(module_name), func_name)(args) or 0)

    return handler


def register(sub: Any) -> None:
    ablate = add_command(
        sub,
        ["ablate"],
        _lazy("evals.ablate_cli:ablate_command"),
        "sweep mixture recipes on proxy models and write a decision report",
    )
    add_config_args(ablate)
    ev = sub.add_parser("eval", help="build eval sets and evaluate checkpoints")
    esub = ev.add_subparsers(dest="eval_command", metavar="EVAL_COMMAND", required=True)
    build = add_command(
        esub,
        ["eval", "build"],
        _lazy("evals.commands:build_command"),
        "build decontaminated eval sets from the eval split",
    )
    add_config_args(build)
    run = add_command(
        esub,
        ["eval", "run"],
        _lazy("evals.commands:run_command"),
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
        "--lm-eval-limit", type=int, default=None, help="lm-eval documents per task (cap)"
    )
    run.add_argument("--max-docs", type=int, default=None, help="documents per set (cap)")
    run.add_argument("--batch-size", type=int, default=8)
    run.add_argument(
        "--seq-length",
        type=int,
        default=None,
        help="tokens per window (default: the model's sequence length)",
    )
