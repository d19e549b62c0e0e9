"""`pretrain plan` and `pretrain launch`."""

from __future__ import annotations

from typing import Any

from pretrain.cli_utils import add_command, add_config_args
from pretrain.placeholder import not_built


def register(sub: Any) -> None:
    plan = add_command(sub, ["plan"], not_built("pretrain plan", 7),
                       "check model, memory, compute and parallel layout before launching")
    add_config_args(plan)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    launch = add_command(sub, ["launch"], not_built("pretrain launch", 7),
                         "launch a Megatron-Core pretraining run through torchrun")
    add_config_args(launch)
    launch.add_argument("--nproc", type=int, default=None, help="processes per node")
    launch.add_argument("--nnodes", default="1", help="nodes (torchrun --nnodes)")
    launch.add_argument("--node-rank", type=int, default=0)
    launch.add_argument("--rdzv-endpoint", default=None, help="host:port for multi-node")
    launch.add_argument("--smoke", action="store_true",
                        help="a few steps at the target layout: fwd, bwd, sync, save, reload")
    launch.add_argument("--override-gate", default=None, metavar="REASON",
                        help="launch a full run without a passing ablation report (recorded)")
