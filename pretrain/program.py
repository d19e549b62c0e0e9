"""Running commands: the plumbing the `pretrain` program (pretrain_app.cli) and each package's
`python -m PACKAGE` share.

A command module is a package's `cli.py`: one handler per command (`handler(args) -> int`, which
imports heavy engines such as Ray or torch inside, so `--help` stays fast) and `register(sub)`,
which adds them with `pretrain.cli_utils.add_command`. `run(parser, argv)` parses, records the
command for the manifests it writes (pretrain.command), sets the progress session up and turns a
`PretrainError` into a one-line error and exit 2. The modules are passed in by whoever composes
the program, so nothing here imports a package above `pretrain`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from types import ModuleType

from pretrain.cli_utils import add_verbosity_args
from pretrain.command import capture
from pretrain.errors import PretrainError
from pretrain.progress import NORMAL, session

PROG = "pretrain"


def add_commands(parser: argparse.ArgumentParser, modules: Iterable[ModuleType]) -> None:
    """`-v`/`-q` and a COMMAND subparser holding every command the `modules` register."""
    add_verbosity_args(parser, default=NORMAL)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in modules:
        module.register(sub)


def command_parser(modules: Iterable[ModuleType]) -> argparse.ArgumentParser:
    """A `pretrain` parser holding only the commands of `modules` (what `python -m PACKAGE` runs)."""
    parser = argparse.ArgumentParser(prog=PROG)
    add_commands(parser, modules)
    return parser


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: this process's arguments) and run the chosen command's handler."""
    argv = list(argv) if argv is not None else sys.argv[1:]
    args = parser.parse_args(argv)
    prog = " ".join([PROG, *getattr(args, "command_path", [args.command])])
    try:
        with capture(argv), session(getattr(args, "verbosity", NORMAL), prog.replace(" ", "-")):
            return int(args.handler(args) or 0)
    except PretrainError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def run_commands(modules: Iterable[ModuleType], argv: Sequence[str] | None = None) -> int:
    """`run` on a parser of `modules`' commands alone: `pretrain launch ...` run as
    `python -m trainer launch ...` records the same command and behaves the same."""
    return run(command_parser(modules), argv)
