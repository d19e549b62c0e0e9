"""`pretrain ablate`: proxy sweeps over mixture recipes (being built)."""

from __future__ import annotations

import argparse

from pretrain.errors import PretrainError


def ablate_command(args: argparse.Namespace) -> int:
    raise PretrainError(
        "pretrain ablate is not built yet (tracked in issue 8); the report and "
        "gate logic are in evals/report.py and evals/gate.py"
    )
