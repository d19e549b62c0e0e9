"""One proxy run's training and evaluation in ONE fresh process (`python -m evals.proxy_worker
COMMANDS.json`): `pretrain launch` (a single rank `--in-process`, else under torchrun), then
`pretrain eval run` on its checkpoint; an in-process rank saves a second Python start, the
Megatron imports and a model build.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    commands = json.loads(Path(args[0]).read_text())
    from evals import cli as evals_cli
    from pretrain.program import run_commands
    from trainer import cli as trainer_cli

    modules = [trainer_cli, evals_cli]  # `pretrain ARGV` for the two commands run here
    code = run_commands(modules, commands["train"])  # the rank took its groups down on return
    return code if code != 0 else run_commands(modules, commands["eval"])


if __name__ == "__main__":
    sys.exit(main())
