"""`pretrain plan`, `pretrain launch` and `pretrain export`: each command's handler (a callable
taking the parsed arguments, returning the exit status; heavy imports inside) and `register`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pretrain.cli_utils import add_command, add_config_args


def plan(args: argparse.Namespace) -> int:
    """`pretrain plan CONFIG`: model, memory, compute and parallel layout, before launching."""
    from pretrain.cli_utils import resolve_config
    from trainer.config import TrainConfig
    from trainer.plan import build_plan, format_plan

    # The flags are overrides of the config's fields, checked by the same model (range and type).
    flags = {"plan.gpu": args.gpu, "plan.mfu": args.mfu, "plan.overhead": args.overhead}
    if args.peak_tflops is not None:
        flags["metrics.peak_flops"] = args.peak_tflops * 1e12
    args.overrides = [*args.overrides, *(f"{k}={v}" for k, v in flags.items() if v is not None)]
    config = resolve_config(TrainConfig, args)
    if config is None:
        return 0
    built = build_plan(config, allow_oom=args.allow_oom)
    print(json.dumps(built, indent=2) if args.json else format_plan(built))
    return 0


def launch(args: argparse.Namespace) -> int:
    """`pretrain launch CONFIG`: a Megatron-Core pretraining run through torchrun."""
    from trainer.launch import launch_command

    return launch_command(args)


def export(args: argparse.Namespace) -> int:
    """`pretrain export RUN_DIR --out DIR`: a checkpoint as a Hugging Face model."""
    from pretrain.locking import output_lock
    from trainer.export import export_hf

    with output_lock(args.out):
        manifest = export_hf(args.run_dir, args.out, args.step, args.tokenizer, args.dtype)
    counts = manifest["counts"]
    print(
        f"exported step {counts['step']} ({counts['parameters']:,} parameters, "
        f"LlamaForCausalLM, {args.dtype}) -> {args.out}"
    )
    return 0


def register(sub: Any) -> None:
    plan_parser = add_command(
        sub,
        ["plan"],
        plan,
        "check model, memory, compute and parallel layout before launching",
    )
    add_config_args(plan_parser)
    plan_parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan_parser.add_argument(
        "--gpu", default=None, help="GPU type: h100, h200, a100, b200, ... (plan.gpu)"
    )
    plan_parser.add_argument(
        "--mfu",
        type=float,
        default=None,
        help="achieved fraction of peak on all executed FLOPs, recompute included (plan.mfu)",
    )
    plan_parser.add_argument(
        "--peak-tflops", type=float, default=None, help="dense bf16 peak per GPU"
    )
    plan_parser.add_argument(
        "--overhead", type=float, default=None, help="wall-time factor on top of training"
    )
    plan_parser.add_argument(
        "--allow-oom",
        action="store_true",
        help="plan a layout that does not fit GPU memory (a warning instead of an error)",
    )
    launch_parser = add_command(
        sub,
        ["launch"],
        launch,
        "launch a Megatron-Core pretraining run through torchrun",
    )
    add_config_args(launch_parser)
    launch_parser.add_argument(
        "--nproc",
        type=int,
        default=None,
        help="processes per node (default: parallel.gpus_per_node)",
    )
    launch_parser.add_argument(
        "--nnodes",
        default=None,
        help="nodes, or MIN:MAX (torchrun --nnodes; default: parallel.nodes)",
    )
    launch_parser.add_argument("--node-rank", type=int, default=None, help="static rendezvous rank")
    launch_parser.add_argument("--rdzv-endpoint", default=None, help="host:port for multi-node")
    launch_parser.add_argument("--rdzv-id", default=None, help="rendezvous id shared by all nodes")
    launch_parser.add_argument("--rdzv-backend", default="c10d", help="torchrun rendezvous backend")
    launch_parser.add_argument(
        "--smoke",
        action="store_true",
        help="a few steps at the target layout: fwd, bwd, sync, save, reload",
    )
    launch_parser.add_argument(
        "--override-gate",
        default=None,
        metavar="REASON",
        help="launch a full run without a passing ablation report (recorded)",
    )
    launch_parser.add_argument(
        "--verify",
        choices=("cached", "full"),
        default=None,
        help="how the launcher checks data bytes: through the hash cache (default) or "
        "re-hashing every file (full; also PRETRAIN_VERIFY=full)",
    )
    launch_parser.add_argument(
        "--in-process",
        action="store_true",
        help="single-rank runs only: train in this process instead of under torchrun",
    )
    _register_export(sub)


def _register_export(sub: Any) -> None:
    export_parser = add_command(
        sub,
        ["export"],
        export,
        "export a checkpoint as a Hugging Face transformers model (LlamaForCausalLM)",
    )
    export_parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="a run directory or one checkpoint"
    )
    export_parser.add_argument(
        "--step", type=int, default=None, help="checkpoint step (default: newest)"
    )
    export_parser.add_argument("--format", choices=["hf"], default="hf", help="output format")
    export_parser.add_argument("--out", required=True, metavar="DIR", help="export directory")
    export_parser.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="tokenizer artifact (default: the run's data.tokenizer_dir or mixture lineage)",
    )
    export_parser.add_argument(
        "--dtype", choices=["float32", "bfloat16", "float16"], default="float32"
    )
