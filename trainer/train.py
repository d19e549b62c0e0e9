"""The one entry point into training: `train(config)`, called on every rank.

Every way a run starts ends here: torchrun's ranks (`python -m trainer.worker`, what `pretrain
launch` and the demo start), a single rank in the launcher's own process (`pretrain launch
--in-process`, the proxy runs of `pretrain eval ablate`), ranks spawned without torchrun
(trainer.worker.spawn_ranks: tests, benchmarks), and `--smoke` for each of them. `train()` sets
the rank's environment (`LocalRank` when no torchrun set it), builds the Trainer with the
callbacks given, runs `fit()` (or the smoke checks, trainer/smoke.py) and takes the process group
down again.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.callbacks import Callback
from trainer.config import TrainConfig

RUN_LOCKED_BY = "PRETRAIN_RUN_LOCKED_BY"
"""Set by `pretrain launch` for the ranks it starts while it holds the run directory's writer
lock: its pid (the lock record's holder). A rank 0 without it takes the lock itself."""


@dataclass(frozen=True)
class LocalRank:
    """A rank started without torchrun, on this machine: the environment torchrun would set."""

    rank: int
    world: int
    port: int

    def environ(self) -> dict[str, str]:
        """torchrun's variables, and gloo's sockets on loopback unless GLOO_SOCKET_IFNAME is set
        (the store on 127.0.0.1 binds loopback only: trainer/local_torchrun.py)."""
        from trainer.local_torchrun import loopback_interface

        return {
            "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME") or loopback_interface(),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(self.port),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world),
            "LOCAL_RANK": str(self.rank),
            "LOCAL_WORLD_SIZE": str(self.world),
        }


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


def train(
    config: TrainConfig,
    *,
    smoke: bool = False,
    callbacks: Sequence[Callback] = (),
    local: LocalRank | None = None,
) -> dict[str, Any]:
    """One rank's whole run; returns its summary. Rank 0 writes metrics, loss.png, the manifest.

    `callbacks` run after the built-in ones (trainer/callbacks.py); `local`: this process is rank
    `local.rank` of a world started without torchrun.
    """
    warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine).*")
    # A rank in the caller's own process (launch --in-process, the ablation's proxies) must not
    # leave its rendezvous variables behind: a later child would inherit MASTER_PORT and try to
    # listen on a port this process may still hold (EADDRINUSE).
    rank_env = {**(local.environ() if local else {}), "PRETRAIN_TORCH_THREADS": ""}
    saved = {name: os.environ.get(name) for name in rank_env}
    if local is not None:
        os.environ.update(local.environ())
    os.environ.setdefault("PRETRAIN_TORCH_THREADS", str(default_threads(1)))
    from pretrain.command import recorded
    from trainer.run_outputs import load_launch_info

    # what this rank writes (checkpoints, the run manifest) records the launcher's command
    command = load_launch_info(Path(config.run.out_dir)).get("command")
    try:
        with recorded(command) if command else nullcontext(), _run_lock(config, command):
            return _run(config, smoke, callbacks)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run_lock(config: TrainConfig, command: list[str] | None) -> AbstractContextManager[Any]:
    """The run directory's writer lock, taken by global rank 0 unless the launcher that started
    this rank holds it (RUN_LOCKED_BY names its pid, trainer/launch.py): ranks spawned without
    torchrun (trainer.worker.spawn_ranks), started by hand, or by an elastic multi-node launch
    (no launcher knew it would be node 0) keep a second writer out of the run themselves. A
    launcher in this process (`--in-process`) holds it already: the lock is re-entered."""
    import socket

    from pretrain.locking import output_lock, read_holder

    run_dir = Path(config.run.out_dir)
    if os.environ.get("RANK", "0") != "0":
        return nullcontext()
    launcher = os.environ.get(RUN_LOCKED_BY)
    holder = read_holder(run_dir) or {}
    here = holder.get("host") == socket.gethostname()
    if here and launcher and launcher.isdigit() and holder.get("pid") == int(launcher):
        return nullcontext()
    return output_lock(run_dir, command)


def _run(config: TrainConfig, smoke: bool, callbacks: Sequence[Callback]) -> dict[str, Any]:
    import torch

    from trainer.loop import Trainer
    from trainer.run_outputs import check_run_dir

    check_run_dir(config.run.out_dir)  # every rank, before its first write (spawned: no launcher)
    run_dir = Path(config.run.out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        trainer = Trainer(config, run_dir, callbacks, evaluate=not smoke)
        if smoke:
            from trainer.smoke import smoke_checks

            return trainer.finish({"smoke": smoke_checks(trainer)})
        return trainer.fit()
    finally:
        from megatron.core import parallel_state

        # megatron's groups go with the process group: left registered, a later in-process
        # load_model (same process) would reuse groups of a destroyed world (ValueError)
        parallel_state.destroy_model_parallel()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
