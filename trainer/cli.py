"""`pretrain plan`, `pretrain launch` and `pretrain export`."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from pretrain.cli_utils import add_command, add_config_args


def _lazy(ref: str) -> Any:
    """A handler that imports `module:function` only when the command runs (keeps --help fast)."""

    def handler(args: argparse.Namespace) -> int:
        module_name, _, func_name = ref.partition(":")
        return int(getattr(importlib.import_module(module_name), func_name)(args) or 0)

    return handler


def register(sub: Any) -> None:
    plan = add_command(
        sub,
        ["plan"],
        _lazy("trainer.plan:plan_command"),
        "check model, memory, compute and parallel layout before launching",
    )
    add_config_args(plan)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument(
        "--gpu", default=None, help="GPU type: h100, h200, a100, b200, ... (plan.gpu)"
    )
    plan.add_argument(
        "--mfu",
        type=float,
        default=None,
        help="achieved fraction of peak on all executed FLOPs, recompute included (plan.mfu)",
    )
    plan.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak per GPU")
    plan.add_argument(
        "--overhead", type=float, default=None, help="wall-time factor on top of training"
    )
    plan.add_argument(
        "--allow-oom",
        action="store_true",
        help="plan a layout that does not fit GPU memory (a warning instead of an error)",
    )
    launch = add_command(
        sub,
        ["launch"],
        _lazy("trainer.launch:launch_command"),
        "launch a Megatron-Core pretraining run through torchrun",
    )
    add_config_args(launch)
    launch.add_argument(
        "--nproc",
        type=int,
        default=None,
        help="processes per node (default: parallel.gpus_per_node)",
    )
    launch.add_argument(
        "--nnodes",
        default=None,
        help="nodes, or MIN:MAX (torchrun --nnodes; default: parallel.nodes)",
    )
    launch.add_argument("--node-rank", type=int, default=None, help="static rendezvous rank")
    launch.add_argument("--rdzv-endpoint", default=None, help="host:port for multi-node")
    launch.add_argument("--rdzv-id", default=None, help="rendezvous id shared by all nodes")
    launch.add_argument("--rdzv-backend", default="c10d", help="torchrun rendezvous backend")
    launch.add_argument(
        "--smoke",
        action="store_true",
        help="a few steps at the target layout: fwd, bwd, sync, save, reload",
    )
    launch.add_argument(
        "--override-gate",
        default=None,
        metavar="REASON",
        help="launch a full run without a passing ablation report (recorded)",
    )
    launch.add_argument(
        "--verify",
        choices=("cached", "full"),
        default=None,
        help="how the launcher checks data bytes: through the hash cache (default) or "
        "re-hashing every file (full; also PRETRAIN_VERIFY=full)",
    )
    launch.add_argument(
        "--in-process",
        action="store_true",
        help="single-rank runs only: train in this process instead of under torchrun",
    )
    _register_export(sub)


def _register_export(sub: Any) -> None:
    export = add_command(
        sub,
        ["export"],
        _lazy("trainer.export:export_command"),
        "export a checkpoint as a Hugging Face transformers model (LlamaForCausalLM)",
    )
    export.add_argument("run_dir", metavar="RUN_DIR", help="a run directory or one checkpoint")
    export.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
    export.add_argument("--format", choices=["hf"], default="hf", help="output format")
    export.add_argument("--out", required=True, metavar="DIR", help="export directory")
    export.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="tokenizer artifact (default: the run's data.tokenizer_dir or mixture lineage)",
    )
    export.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
