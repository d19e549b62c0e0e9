"""`pretrain ablate` and `pretrain eval ...`."""

from __future__ import annotations

from typing import Any

from pretrain.cli_utils import add_command, add_config_args
from pretrain.placeholder import not_built


def register(sub: Any) -> None:
    ablate = add_command(sub, ["ablate"], not_built("pretrain ablate", 8),
                         "sweep mixture recipes on proxy models and write a decision report")
    add_config_args(ablate)
    ev = sub.add_parser("eval", help="build eval sets and evaluate checkpoints")
    esub = ev.add_subparsers(dest="eval_command", metavar="EVAL_COMMAND", required=True)
    build = add_command(esub, ["eval", "build"], not_built("pretrain eval build", 8),
                        "build decontaminated eval sets from the eval split")
    add_config_args(build)
    run = add_command(esub, ["eval", "run"], not_built("pretrain eval run", 8),
                      "evaluate a checkpoint on eval sets (bits per byte, tasks)")
    run.add_argument("checkpoint_dir", metavar="CHECKPOINT_DIR")
    run.add_argument("--sets", required=True, metavar="DIR")
