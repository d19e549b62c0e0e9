"""The `pretrain` program: one parser holding every package's commands.

This package is the program's composition root, the top layer: it imports each package's `cli`
module (by module, so go-to-definition reaches every command) and nothing below may import it.
Each package's `cli.py` is the one place its commands are: a handler per command and
`register(sub)`, which adds them (pretrain.program describes the contract and runs them).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from types import ModuleType

from pretrain.program import PROG, add_commands, run


def package_clis() -> tuple[ModuleType, ...]:
    """Every command module, in `--help` order. Imported when the parser is built, not when this
    module is; each imports heavy engines inside its handlers."""
    from data_pipeline import cli as data_cli
    from evals import cli as evals_cli
    from mixtures import cli as mixtures_cli
    from pretrain import cli as pretrain_cli
    from tokenizer import cli as tokenizer_cli
    from trainer import cli as trainer_cli

    return (
        pretrain_cli,
        data_cli,
        tokenizer_cli,
        mixtures_cli,
        trainer_cli,
        evals_cli,
    )


def version_line() -> str:
    """`pretrain --version`: this package's version and the engines a run's results depend on."""
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist in ("pretrain-corpus", "megatron-core", "torch", "ray"):
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist} not installed")
    return f"{parts[0]} ({', '.join(parts[1:])})"


class _Version(argparse.Action):
    """Print `version_line()` unwrapped and exit 0 (argparse's own action re-wraps the line)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(version_line())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Raw text -> tagged, deduplicated corpus -> locked tokenizer -> exact "
        "mixtures -> proxy ablations -> gated Megatron-Core launch.",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="show the versions of pretrain and its engines"
    )
    add_commands(parser, package_clis())
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)
