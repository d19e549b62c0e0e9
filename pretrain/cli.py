"""The `pretrain` program: one entry point dispatching to each package's `cli.py`.

Each package's `cli.py` is the one place its commands are: a handler per command (`handler(args)
-> int`, importing heavy engines such as Ray or torch inside, so `pretrain --help` stays fast) and
`register(subparsers)`, which adds them. `package_clis()` lists those modules. This module is the
program's composition root: the one module of `pretrain` that imports the packages above it, and
only their `cli` modules (pyproject's import-linter layers contract names each such import).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from pretrain.cli_utils import add_verbosity_args
from pretrain.command import capture
from pretrain.errors import PretrainError
from pretrain.progress import NORMAL, session


def package_clis() -> tuple[ModuleType, ...]:
    """Each package's command module, in `--help` order. Imported here, when the parser is built
    (not when this module is), by module so that go-to-definition reaches every command; each
    defines its handlers and `register(subparsers)`, and imports heavy engines inside handlers."""
    from data_pipeline import cli as data_cli
    from evals import cli as evals_cli
    from mixtures import cli as mixtures_cli
    from pretrain import core_cli
    from tokenizer import cli as tokenizer_cli
    from trainer import cli as trainer_cli

    return (core_cli, data_cli, tokenizer_cli, mixtures_cli, trainer_cli, evals_cli)


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
        prog="pretrain",
        description="Raw text -> tagged, deduplicated corpus -> locked tokenizer -> exact "
        "mixtures -> proxy ablations -> gated Megatron-Core launch.",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="show the versions of pretrain and its engines"
    )
    add_verbosity_args(parser, default=NORMAL)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in package_clis():
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(argv) if argv is not None else sys.argv[1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    prog = " ".join(["pretrain", *getattr(args, "command_path", [args.command])])
    try:
        with capture(argv), session(getattr(args, "verbosity", NORMAL), prog.replace(" ", "-")):
            return int(args.handler(args) or 0)
    except PretrainError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
