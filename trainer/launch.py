"""`pretrain launch CONFIG`: the gate, the run directory, then torchrun.

Single node by default (`torchrun --standalone`); multi-node through rendezvous flags
(`--nnodes 2 --rdzv-endpoint HOST:PORT --rdzv-id ID`, run once per node). Every rank runs
`python -m trainer.worker RUN/launch/config.json`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from pretrain.command import current_command
from pretrain.config import config_dict, config_sha256, dump_resolved, load_config
from pretrain.errors import ConfigError, GateRefused, PretrainError
from pretrain.locking import output_lock
from pretrain.manifest import atomic_write_json
from pretrain.progress import attach
from trainer.config import TrainConfig


def gate_decision(config: TrainConfig, override_reason: str | None) -> dict[str, Any]:
    """What the run manifest records under `gate`; raises GateRefused for an uncleared full run."""
    if config.run.kind != "full":
        return {"status": "not required", "kind": config.run.kind}
    from trainer.gate import check_gate

    try:
        return check_gate(config_dict(config), config.gate.report_dir)
    except GateRefused as exc:
        if not override_reason:
            raise
        return {"status": "overridden", "override_reason": override_reason, "refusal": str(exc)}


def default_threads(nproc: int) -> int:
    """Torch threads per CPU rank: PRETRAIN_TORCH_THREADS or OMP_NUM_THREADS when set, else 1.

    One thread per rank by default: on a shared or oversubscribed machine, multi-threaded CPU
    ranks spin against each other (measured here: 40x slower at 2 threads under load); raise it
    on a dedicated machine with PRETRAIN_TORCH_THREADS=<cores / nproc>.
    """
    for name in ("PRETRAIN_TORCH_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(name, "").isdigit():
            return max(1, int(os.environ[name]))
    return 1


def torchrun_command(
    args: argparse.Namespace, nproc: int, nnodes: str, config_json: Path
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--nnodes={nnodes}",
        "--max-restarts=0",
    ]
    if nnodes == "1" and not args.rdzv_endpoint:
        command.append("--standalone")
    else:
        if not args.rdzv_endpoint:
            raise ConfigError(
                f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (the same on "
                "every node) and --rdzv-id"
            )
        command += [
            f"--rdzv-backend={args.rdzv_backend}",
            f"--rdzv-endpoint={args.rdzv_endpoint}",
            f"--rdzv-id={args.rdzv_id or 'pretrain'}",
        ]
        if args.node_rank is not None:
            command.append(f"--node-rank={args.node_rank}")
    command += ["-m", "trainer.worker", str(config_json)]
    if args.smoke:
        command.append("--smoke")
    return command


def _layout(config: TrainConfig, args: argparse.Namespace) -> tuple[int, str]:
    nproc = args.nproc or config.parallel.gpus_per_node
    nnodes = str(args.nnodes or config.parallel.nodes)
    par = config.parallel
    model_parallel = par.tensor * par.pipeline * par.context
    world = nproc * int(nnodes.split(":")[-1])
    if world % model_parallel:
        raise ConfigError(
            f"--nproc {nproc} x --nnodes {nnodes} = {world} processes is not a "
            f"multiple of tensor*pipeline*context = {model_parallel}; change "
            "--nproc or the parallel sizes"
        )
    return nproc, nnodes


def check_backend(config: TrainConfig) -> None:
    """Refuse an nccl launch on a machine without CUDA (it would fail deep inside torch)."""
    import torch

    if config.parallel.backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError(
            "parallel.backend = nccl needs CUDA GPUs and this machine has none; on CPU use "
            "parallel.backend=gloo with a model that fits (see trainer/demo.py TINY_OVERRIDE)"
        )
    from trainer.fast_path import check_device_support

    check_device_support(config, "cuda" if torch.cuda.is_available() else "cpu")


def _smoke_config(config: TrainConfig) -> TrainConfig:
    run = config.run.model_copy(update={"out_dir": str(Path(config.run.out_dir) / "smoke")})
    return config.model_copy(update={"run": run})


def _run_in_process(config: TrainConfig, nproc: int, nnodes: str, smoke: bool) -> int:
    """One rank in this process: no torchrun agent (saves its start-up on small CPU runs)."""
    if nproc * int(nnodes.split(":")[-1]) != 1:
        raise ConfigError(
            f"--in-process runs one rank, but the layout asks for {nproc} x "
            f"{nnodes}; drop --in-process or pass --nproc 1"
        )
    import torch

    from trainer.model import _free_port
    from trainer.train import load_launch_info, run_training

    os.environ.update(
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
    )
    os.environ.setdefault("PRETRAIN_TORCH_THREADS", str(default_threads(1)))
    try:
        run_training(config, load_launch_info(Path(config.run.out_dir)), smoke=smoke)
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    print(f"[launch] done: {config.run.out_dir}", flush=True)
    return 0


def _print_dry_run(config: TrainConfig, command: list[str], override: str | None) -> int:
    print(dump_resolved(config), end="")
    print(f"# torchrun: {' '.join(command)}")
    try:
        print(f"# gate: {gate_decision(config, override)['status']}")
    except GateRefused as exc:
        print(f"# gate: would refuse: {exc}")
    return 0


def _write_launch_files(
    config: TrainConfig, gate: dict[str, Any], command: list[str], config_json: Path
) -> None:
    """RUN/launch/config.json (what every rank reads) and RUN/launch.json (gate, command)."""
    config_json.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(config_json, config_dict(config))
    atomic_write_json(
        config_json.parent.parent / "launch.json",
        {
            "gate": gate,
            "command": current_command(),
            "torchrun": command,
            "config_sha256": config_sha256(config),
            "launch_id": uuid.uuid4().hex,
        },
    )


def launch_command(args: argparse.Namespace) -> int:
    """Handler of `pretrain launch`."""
    config = load_config(TrainConfig, args.config, args.overrides)
    run = config.run.model_copy(update={"out_dir": str(Path(config.run.out_dir).resolve())})
    config = config.model_copy(update={"run": run})
    attach(run.out_dir)  # this launch's log (ranks' stderr included) ends in RUN/.logs/
    if args.smoke:
        config = _smoke_config(config)
    nproc, nnodes = _layout(config, args)
    run_dir = Path(config.run.out_dir)
    config_json = run_dir / "launch" / "config.json"
    command = torchrun_command(args, nproc, nnodes, config_json)
    if args.dry_run:
        return _print_dry_run(config, command, args.override_gate)
    with output_lock(run_dir):
        return _launch(config, args, nproc, nnodes, command)


def _launch(
    config: TrainConfig, args: argparse.Namespace, nproc: int, nnodes: str, command: list[str]
) -> int:
    run_dir = Path(config.run.out_dir)
    config_json = run_dir / "launch" / "config.json"
    gate = gate_decision(config, args.override_gate)
    check_backend(config)
    _write_launch_files(config, gate, command, config_json)
    if getattr(args, "in_process", False):
        return _run_in_process(config, nproc, nnodes, args.smoke)
    env = dict(os.environ)
    env.setdefault("PRETRAIN_TORCH_THREADS", str(default_threads(nproc)))
    env.setdefault("OMP_NUM_THREADS", env["PRETRAIN_TORCH_THREADS"])
    print(
        f"[launch] {nproc} x {nnodes} process(es) -> {run_dir} (gate: {gate['status']})", flush=True
    )
    error_file = run_dir / "launch" / "error.txt"
    error_file.unlink(missing_ok=True)
    result = subprocess.run(command, env=env, check=False)
    if result.returncode != 0 and error_file.is_file():
        raise PretrainError(error_file.read_text())
    if result.returncode != 0:
        raise PretrainError(
            f"training exited with status {result.returncode}; see the log above "
            f"and {run_dir / 'metrics.jsonl'}"
        )
    print(f"[launch] done: {run_dir}", flush=True)
    return 0
