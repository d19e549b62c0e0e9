"""Helpers shared by every package's `cli.py`: config arguments, `--set`, `--dry-run`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from pretrain.config import dump_resolved, load_config
from pretrain.progress import attach

M = TypeVar("M", bound=BaseModel)


def add_command(
    sub: Any,
    path: list[str],
    handler: Callable[[argparse.Namespace], int],
    help_text: str,
) -> argparse.ArgumentParser:
    """Add a (sub)command whose error prefix is `pretrain <path...>`."""
    parser = sub.add_parser(path[-1], help=help_text, description=help_text)
    parser.set_defaults(handler=handler, command_path=path)
    add_verbosity_args(parser, default=argparse.SUPPRESS)
    return parser


def positive_int(text: str) -> int:
    """Argument type of a count (documents, batch rows, nodes, CPUs): 0 or less would crash or
    silently drop data."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value


def add_verbosity_args(parser: argparse.ArgumentParser, default: Any) -> None:
    """`-v` (library logs on the terminal) and `-q` (only the summary and errors)."""
    from pretrain.progress import QUIET, VERBOSE

    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        action="store_const",
        const=VERBOSE,
        default=default,
        help="show Ray's, Megatron's and other libraries' logs on the terminal "
        "(otherwise they go to the artifact's .logs/)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        dest="verbosity",
        action="store_const",
        const=QUIET,
        default=default,
        help="print only the summary and errors",
    )


def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="CONFIG", help="YAML config (examples in configs/)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="a.b=VALUE",
        help="override a config value (repeatable)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="run every check the real run makes before working (config, inputs, artifacts), "
        "print the resolved config and its sha256, then exit",
    )


def resolve_config(
    model: type[M], args: argparse.Namespace, check: Callable[[M], str | None] | None = None
) -> M | None:
    """Load CONFIG with overrides; on --dry-run run `check` (the real run's pre-work checks, which
    raise the same one-line errors), print the resolved config and return None."""
    config = load_config(model, getattr(args, "config", None), args.overrides)
    attach(getattr(config, "out", None) or getattr(config, "output", None))
    if getattr(args, "dry_run", False):
        checked = check(config) if check is not None else None
        print(dump_resolved(config), end="")
        if checked:
            print(f"# checked: {checked}")
        return None
    return config
