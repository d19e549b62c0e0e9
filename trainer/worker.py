"""The torchrun worker: `python -m trainer.worker RESOLVED_CONFIG.json [--smoke]`.

Every rank runs this module. The `__main__` guard matters: dist_checkpointing's save starts
helper processes, which re-import the main module under the spawn start method.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pretrain.config import parse_config
from pretrain.errors import OutputLocked, PretrainError
from pretrain.lifetime import die_with_parent
from pretrain.manifest import atomic_write_bytes
from trainer.config import TrainConfig

if TYPE_CHECKING:
    from trainer.callbacks import Callback


def main(argv: list[str] | None = None) -> int:
    die_with_parent()  # torchrun starts ranks in their own session: end with the agent
    os.register_at_fork(after_in_child=die_with_parent)  # and megatron's forked savers with us
    parser = argparse.ArgumentParser(prog="trainer.worker")
    parser.add_argument("config_json")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    config = parse_config(
        TrainConfig, json.loads(Path(args.config_json).read_text()), source=args.config_json
    )
    from trainer.train import train

    try:
        train(config, smoke=args.smoke)
    except PretrainError as exc:
        print(f"pretrain launch: error: {exc}", file=sys.stderr, flush=True)
        from trainer.run_outputs import is_own_run

        run_dir = Path(config.run.out_dir)  # error.txt is for the launcher, which made launch/:
        refused = isinstance(exc, OutputLocked)  # never in a refused folder, or another's run
        if not refused and (run_dir / "launch").is_dir() and is_own_run(run_dir):
            atomic_write_bytes(run_dir / "launch" / "error.txt", str(exc).encode())
        return 2
    return 0


if __name__ == "__mp_main__":  # a helper megatron spawned from a rank: end with the rank
    die_with_parent()

if __name__ == "__main__":
    sys.exit(main())


def _rank_main(
    rank: int,
    world: int,
    port: int,
    config_data: dict[str, Any],
    smoke: bool,
    callbacks: Sequence[Callback],
) -> None:
    """Body of one spawned rank (torch.multiprocessing)."""
    die_with_parent()
    os.register_at_fork(after_in_child=die_with_parent)
    from trainer.train import LocalRank, train

    config = parse_config(TrainConfig, config_data)
    train(config, smoke=smoke, callbacks=callbacks, local=LocalRank(rank, world, port))


def spawn_ranks(
    config_data: dict[str, Any],
    world: int,
    smoke: bool = False,
    timeout_s: float = 240,
    callbacks: Sequence[Callback] = (),
) -> None:
    """Run `world` ranks on this machine without torchrun (tests, benchmarks).

    `callbacks` (picklable; their classes importable by the spawned ranks) are added to every
    rank's trainer after the built-in ones: how tests install fault injection
    (tests/trainer/faults.py).

    Raises torch.multiprocessing's ProcessRaisedException / ProcessExitedException when a rank
    fails, and TimeoutError (after killing the ranks) when they run past `timeout_s`.
    """
    import time

    import torch.multiprocessing as mp

    from trainer.model import _free_port

    context = mp.start_processes(
        _rank_main,
        args=(world, _free_port(), config_data, smoke, tuple(callbacks)),
        nprocs=world,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=1.0):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            raise TimeoutError(f"{world} rank(s) did not finish within {timeout_s} s")
