"""What `pretrain launch CONFIG` runs: the preflight (every check, before torchrun starts and
before anything is written; `--dry-run` runs the same), the torchrun command, then the ranks.
Single node: a c10d rendezvous on 127.0.0.1 only (trainer/local_torchrun.py); multi-node:
`--nnodes 2 --rdzv-endpoint HOST:PORT --rdzv-id ID`, once per node."""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from pretrain.config import config_dict, config_sha256, dump_resolved
from pretrain.errors import ConfigError, GateRefused, PretrainError
from pretrain.lifetime import die_with_parent
from pretrain.provenance import current_command
from pretrain.storage import write_json
from trainer.config import TrainConfig, refuse_plan_only
from trainer.worker import RUN_LOCKED_BY

LOOPBACK = "127.0.0.1"


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


def is_local(args: argparse.Namespace, nnodes: str) -> bool:
    """One node and no rendezvous endpoint given: everything listens on 127.0.0.1 only."""
    return nnodes == "1" and not args.rdzv_endpoint


def torchrun_command(
    args: argparse.Namespace, nproc: int, nnodes: str, config_json: Path
) -> list[str]:
    local = is_local(args, nnodes)
    command = [
        sys.executable,
        "-m",
        "trainer.local_torchrun" if local else "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--nnodes={nnodes}",
        "--max-restarts=0",
    ]
    if local:  # what --standalone does, on loopback (see trainer/local_torchrun.py)
        command += [
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={LOOPBACK}:0",
            f"--rdzv-id={uuid.uuid4().hex[:12]}",
            f"--local-addr={LOOPBACK}",
        ]
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


def layout_of(config: TrainConfig, args: argparse.Namespace) -> tuple[int, str]:
    """(processes per node, nodes): the flags, else the config's layout, checked against it."""
    nproc = args.nproc or config.parallel.gpus_per_node
    nnodes = str(args.nnodes or config.parallel.nodes)
    world = nproc * int(nnodes.split(":")[-1])
    if args.in_process and world != 1:
        raise ConfigError(
            f"--in-process runs one rank, but the layout asks for {nproc} x "
            f"{nnodes}; drop --in-process or pass --nproc 1"
        )
    config.parallel.check_world(world, f"--nproc {nproc} x --nnodes {nnodes}")
    return nproc, nnodes


def print_dry_run(config: TrainConfig, command: list[str], override: str | None) -> int:
    """The resolved config and torchrun command, then the launcher's preflight (not the CUDA
    check: a dry run is often made on a machine without the run's GPUs)."""
    print(dump_resolved(config), end="", flush=True)
    print(f"# torchrun: {' '.join(command)}", flush=True)
    gate = preflight(config, override)
    print(f"# gate: {gate['status']}" + (f": {gate['verdict']}" if gate.get("verdict") else ""))
    print("# preflight: ok (gate, data and tokenizer hashes, resume identity)")
    return 0


def preflight(config: TrainConfig, override_gate: str | None, cuda: bool = False) -> dict[str, Any]:
    """Everything the ranks would check, checked here before torchrun starts or anything is
    written: a layout the ranks cannot run (context parallel); the gate; the mixture and its
    encoded data, byte for byte; the tokenizer pin; the build pin; the identity recorded by the
    checkpoint a resume would load. Raises the same one-line errors; returns the gate decision.
    `cuda`: also refuse nccl without GPUs (not in a dry run, which is often made on a machine
    without the run's GPUs)."""
    refuse_plan_only(config)
    gate = gate_decision(config, override_gate)
    if cuda:
        import torch

        from trainer.model import check_device_support, device_type

        if config.parallel.backend == "nccl" and not torch.cuda.is_available():
            raise ConfigError(  # it would fail deep inside torch
                "parallel.backend = nccl needs CUDA GPUs and this machine has none; on CPU use "
                "parallel.backend=gloo with a model that fits (configs/train_sample.yaml)"
            )
        check_device_support(config, device_type(config))
    from trainer.checkpoint import read_state, resume_point
    from trainer.data import check_resume, open_data, resolve_vocab

    found = resume_point(Path(config.run.out_dir)) if config.checkpoint.resume else None
    name, recorded = (str(found), read_state(found)) if found is not None else ("", None)
    data = open_data(config)
    vocab_size = resolve_vocab(config, data)
    check_resume(config, data, recorded, vocab_size, name)
    if config.checkpoint.init_from and recorded is None:  # what the ranks' init_weights checks
        from trainer.checkpoint import init_point
        from trainer.data import check_init_from

        path = init_point(Path(config.checkpoint.init_from))
        check_init_from(config, data, read_state(path), vocab_size, str(path))
    return gate


def _torchrun_env(local: bool, holds_lock: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PRETRAIN_VERIFY", RUN_LOCKED_BY)}
    if holds_lock:  # the ranks' rank 0 then takes no lock of its own (trainer/worker.py)
        env[RUN_LOCKED_BY] = str(os.getpid())
    from trainer.local_torchrun import loopback_interface
    from trainer.model import default_threads

    env.setdefault("OMP_NUM_THREADS", str(default_threads()))  # what each CPU rank uses
    if local:  # gloo's and NCCL's own sockets on loopback too
        env.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
        env.setdefault("NCCL_SOCKET_IFNAME", loopback_interface())
    return env


def start_ranks(
    config: TrainConfig,
    args: argparse.Namespace,
    layout: tuple[int, str, bool],
    command: list[str],
    gate: dict[str, Any],
) -> int:
    """RUN/launch/config.json (what every rank reads) and RUN/launch.json (gate, command), then
    the ranks: torchrun's, or the one rank in this process (`--in-process`)."""
    (nproc, nnodes, single_writer), run_dir = layout, Path(config.run.out_dir)
    (run_dir / "launch").mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "launch" / "config.json", config_dict(config))
    launch_info: dict[str, Any] = {"gate": gate, "command": current_command(), "torchrun": command}
    launch_info.update(config_sha256=config_sha256(config), launch_id=uuid.uuid4().hex)
    write_json(run_dir / "launch.json", launch_info)
    if args.in_process:  # the function torchrun's ranks run, in this process
        from trainer.worker import run

        run(config, smoke=args.smoke)
        print(f"[launch] done: {run_dir}", flush=True)
        return 0
    print(
        f"[launch] {nproc} x {nnodes} process(es) -> {run_dir} (gate: {gate['status']}"
        + (f": {gate['verdict']})" if gate.get("verdict") else ")"),
        flush=True,
    )
    error_file = run_dir / "launch" / "error.txt"
    error_file.unlink(missing_ok=True)
    result = subprocess.run(
        command,
        env=_torchrun_env(is_local(args, nnodes), single_writer),
        check=False,
        preexec_fn=functools.partial(die_with_parent, os.getpid()),  # agent dies with us
    )
    if result.returncode != 0 and error_file.is_file():
        raise PretrainError(error_file.read_text())
    if result.returncode != 0:
        raise PretrainError(
            f"training exited with status {result.returncode}; see the log above "
            f"and {run_dir / 'metrics.jsonl'}"
        )
    print(f"[launch] done: {run_dir}", flush=True)
    return 0
