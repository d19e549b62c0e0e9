"""Commands whose capability has not landed yet say so plainly instead of pretending."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pretrain.errors import PretrainError


def not_built(what: str, issue: int) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        raise PretrainError(
            f"{what} is not built yet (tracked in issue {issue}); "
            "see README.md for what works today"
        )

    return handler
