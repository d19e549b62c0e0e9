"""`run(config)`, the one function every rank calls: torchrun starts each rank as
`python -m trainer.worker RUN/launch/config.json [--smoke]`; `pretrain launch --in-process` calls
`run()` in its own process (a world of one, trainer/model.py). The `__main__` guard matters:
dist_checkpointing's save starts helpers that re-import the main module (spawn)."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import warnings
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pretrain.config import parse_config
from pretrain.errors import OutputLocked, PretrainError
from pretrain.lifetime import die_with_parent
from pretrain.storage import write_atomic
from trainer.config import TrainConfig

if TYPE_CHECKING:
    from trainer.callbacks import Callback

RUN_LOCKED_BY = "PRETRAIN_RUN_LOCKED_BY"
"""Set by `pretrain launch` for the ranks it starts while it holds the run directory's writer
lock: its pid (the lock record's holder). A rank 0 without it takes the lock itself."""


def main(argv: list[str] | None = None, callbacks: Sequence[Callback] = ()) -> int:
    """torchrun's entry for every rank; a PretrainError is one line on stderr (and in
    RUN/launch/error.txt for the launcher), exit 2. `callbacks`: for an entry that wraps this
    one (the tests' fault injection, tests/trainer/rank_entry.py)."""
    die_with_parent()  # torchrun starts ranks in their own session: end with the agent
    os.register_at_fork(after_in_child=die_with_parent)  # and megatron's forked savers with us
    parser = argparse.ArgumentParser(prog="trainer.worker")
    parser.add_argument("config_json")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    config = parse_config(
        TrainConfig, json.loads(Path(args.config_json).read_text()), source=args.config_json
    )
    try:
        run(config, smoke=args.smoke, callbacks=callbacks)
    except PretrainError as exc:
        print(f"pretrain launch: error: {exc}", file=sys.stderr, flush=True)
        from trainer.run_outputs import is_own_run

        run_dir = Path(config.run.out_dir)  # error.txt is for the launcher, which made launch/:
        refused = isinstance(exc, OutputLocked)  # never in a refused folder, or another's run
        if not refused and (run_dir / "launch").is_dir() and is_own_run(run_dir):
            write_atomic(run_dir / "launch" / "error.txt", str(exc).encode())
        return 2
    return 0


def run(
    config: TrainConfig, *, smoke: bool = False, callbacks: Sequence[Callback] = ()
) -> dict[str, Any]:
    """One rank's whole run; returns its summary. Rank 0 writes metrics, loss.png, the manifest.
    `callbacks` run after the built-in ones (trainer/callbacks.py)."""
    warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine).*")
    from pretrain.provenance import recorded
    from trainer.local_torchrun import loopback_gloo
    from trainer.model import close_distributed
    from trainer.run_outputs import check_run_dir, load_launch_info

    check_run_dir(config.run.out_dir)  # every rank, before its first write
    # what this rank writes (checkpoints, the run manifest) records the launcher's command
    command = load_launch_info(Path(config.run.out_dir)).get("command")
    alone = "WORLD_SIZE" not in os.environ  # not started by torchrun: a world of one
    with (
        loopback_gloo() if alone else nullcontext(),
        recorded(command) if command else nullcontext(),
        _run_lock(Path(config.run.out_dir)),
    ):
        try:
            trainer = config.build(callbacks, evaluate=not smoke)
            if smoke:
                from trainer.smoke import smoke_checks

                return trainer.finish({"smoke": smoke_checks(trainer)})
            return trainer.fit()
        finally:
            # left registered, a later in-process load_model would reuse a destroyed world
            close_distributed()


def _run_lock(run_dir: Path) -> AbstractContextManager[Any]:
    """The run directory's writer lock, taken by global rank 0 unless the launcher that started
    this rank holds it (RUN_LOCKED_BY names its pid, trainer/launch.py): ranks started by hand or
    by an elastic multi-node launch (no launcher knew it would be node 0) keep a second writer
    out of the run themselves. A launcher in this process (`--in-process`) holds it already: the
    lock is re-entered."""
    from pretrain.locking import output_lock, read_holder

    if os.environ.get("RANK", "0") != "0":
        return nullcontext()
    launcher = os.environ.get(RUN_LOCKED_BY)
    holder = read_holder(run_dir) or {}
    here = holder.get("host") == socket.gethostname()
    if here and launcher and launcher.isdigit() and holder.get("pid") == int(launcher):
        return nullcontext()
    return output_lock(run_dir)


if __name__ == "__mp_main__":  # a helper megatron spawned from a rank: end with the rank
    die_with_parent()

if __name__ == "__main__":
    sys.exit(main())
