"""The `pretrain` program: one entry point dispatching to each package's `cli.py`.

Each package module exposes `register(subparsers)`, adding its commands with a `handler` default
`handler(args) -> int`. Package CLIs import heavy engines (Ray, torch) inside handlers only, so
`pretrain --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from pretrain.cli_utils import add_verbosity_args
from pretrain.command import capture
from pretrain.errors import PretrainError
from pretrain.progress import NORMAL, session

PACKAGE_CLIS = (
    "pretrain.core_cli",
    "data_pipeline.cli",
    "tokenizer.cli",
    "mixtures.cli",
    "trainer.cli",
    "evals.cli",
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
        prog="pretrain",
        description="Raw text -> tagged, deduplicated corpus -> locked tokenizer -> exact "
        "mixtures -> proxy ablations -> gated Megatron-Core launch.",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="show the versions of pretrain and its engines"
    )
    add_verbosity_args(parser, default=NORMAL)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in PACKAGE_CLIS:
        importlib.import_module(module_name).register(sub)
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
