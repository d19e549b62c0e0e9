"""The torchrun worker: `python -m trainer.worker RESOLVED_CONFIG.json [--smoke]`.

Every rank runs this module. The `__main__` guard matters: dist_checkpointing's save starts
helper processes, which re-import the main module under the spawn start method.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pretrain.config import parse_config
from pretrain.errors import PretrainError
from pretrain.manifest import atomic_write_bytes
from trainer.config import TrainConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trainer.worker")
    parser.add_argument("config_json")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    config = parse_config(
        TrainConfig, json.loads(Path(args.config_json).read_text()), source=args.config_json
    )
    from trainer.train import load_launch_info, run_training

    try:
        run_training(config, load_launch_info(Path(config.run.out_dir)), smoke=args.smoke)
    except PretrainError as exc:
        print(f"pretrain launch: error: {exc}", file=sys.stderr, flush=True)
        error_file = Path(config.run.out_dir) / "launch" / "error.txt"
        error_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(error_file, str(exc).encode())
        return 2
    finally:
        import torch

        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
