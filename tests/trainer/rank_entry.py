"""`python -m tests.trainer.rank_entry CONFIG.json CALLBACKS.json`: trainer.worker's entry (what
torchrun starts for `pretrain launch`) with the tests' callbacks added to every rank's trainer
(tests/trainer/faults.py: fault injection and an event recorder), so the production loop and
config carry no testing aids and the tests start ranks the one way runs start them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pretrain.lifetime import die_with_parent


def main(argv: list[str]) -> int:
    from tests.trainer import faults
    from trainer import worker

    config_json, callbacks_json = argv
    specs = json.loads(Path(callbacks_json).read_text())
    callbacks = [getattr(faults, name)(*args) for name, args in specs.items()]
    return worker.main([config_json], callbacks=callbacks)


if __name__ == "__mp_main__":  # a helper megatron spawned from a rank: end with the rank
    die_with_parent()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
