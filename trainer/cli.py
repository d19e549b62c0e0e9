"""`pretrain plan`, `pretrain launch` and `pretrain export`: each command's handler (a callable
taking the parsed arguments, returning the exit status; heavy imports inside) and `register`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pretrain.program import add_command, add_config_args, resolve_config


def plan(args: argparse.Namespace) -> int:
    """`pretrain plan CONFIG`: model, memory, compute and parallel layout, before launching."""
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
    """`pretrain launch CONFIG`: a Megatron-Core pretraining run through torchrun. Every check
    before torchrun, then the lock, then the run. The run directory is checked first
    (`check_run_dir`): new, empty, or one of our runs."""
    import contextlib
    from pathlib import Path

    from pretrain.config import load_config
    from pretrain.locking import check_unlocked, output_lock
    from pretrain.progress import attach
    from pretrain.rayinit import environ
    from trainer.config import TrainConfig
    from trainer.launch import layout_of, preflight, print_dry_run, start_ranks, torchrun_command
    from trainer.run_outputs import SMOKE_DIR, check_run_dir

    config = load_config(TrainConfig, args.config, args.overrides)
    check_run_dir(config.run.out_dir)  # a file, a URL, or a folder of someone else's: one line
    run_dir = Path(config.run.out_dir).resolve()
    if args.smoke:
        run_dir = run_dir / SMOKE_DIR
        check_run_dir(run_dir, "run.out_dir's smoke folder")
    config = config.model_copy(
        update={"run": config.run.model_copy(update={"out_dir": str(run_dir)})}
    )
    nproc, nnodes = layout_of(config, args)
    command = torchrun_command(args, nproc, nnodes, run_dir / "launch" / "config.json")
    # every node's launcher writes the same run directory: on several nodes only node rank 0
    # holds the writer lock; without --node-rank (c10d elastic) a node learns its rank only at
    # the rendezvous, so every launcher refuses a held run directory before writing and global
    # rank 0 takes the lock for the run (trainer/worker.py, RUN_LOCKED_BY)
    single_writer = nnodes == "1" or args.node_rank == 0
    # PRETRAIN_VERIFY for the launcher's own checks only: the ranks then find the hash cache
    # fresh (see pretrain/hashcache.py)
    with environ(**({"PRETRAIN_VERIFY": args.verify} if args.verify else {})):
        if args.dry_run:
            return print_dry_run(config, command, args.override_gate)
        if single_writer or args.node_rank is None:  # None: elastic, see above
            # a run being trained is refused naming its holder before the preflight reads its
            # checkpoints (half-pruned ones, a resume identity the holder is about to replace)
            check_unlocked(run_dir)
        gate = preflight(config, args.override_gate, cuda=True)
    with output_lock(run_dir) if single_writer else contextlib.nullcontext():
        # only now is this launch the run's writer: a refusal before here (the preflight, a
        # launch that holds the run) leaves the run folder as it was, its log in the temp dir
        attach(run_dir)  # this launch's log (ranks' stderr included) ends in RUN/.logs/
        return start_ranks(config, args, (nproc, nnodes, single_writer), command, gate)


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
