"""Running commands, for the `pretrain` program (pretrain_app.cli) and a proxy run's process: each
package's `cli.py` has a handler per command and `register(sub)`, built with the argument helpers
here (`add_command`, config arguments, `--set`, `--dry-run`); `run` parses, records the command,
sets up the terminal session and prints a `PretrainError` as one line, exit 2."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel

from pretrain.config import dump_resolved, load_config
from pretrain.errors import USER_ERRNOS, PretrainError, os_refusal
from pretrain.hashcache import verify_mode
from pretrain.lifetime import Terminated, stop_on_sigterm
from pretrain.progress import NORMAL, QUIET, VERBOSE, attach, session
from pretrain.provenance import capture

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


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: this process's arguments) and run the chosen command's handler."""
    argv = list(argv) if argv is not None else sys.argv[1:]
    args = parser.parse_args(argv)
    prog = " ".join([PROG, *getattr(args, "command_path", [args.command])])
    previous = stop_on_sigterm()
    try:
        verify_mode()  # a mistyped PRETRAIN_VERIFY is refused before anything runs
        with capture(argv), session(getattr(args, "verbosity", NORMAL), prog.replace(" ", "-")):
            return _handle(args)
    except Terminated:
        print(
            f"{prog}: terminated (SIGTERM); run the same command again: what was finished is "
            "reused",
            file=sys.stderr,
        )
        return 143
    except PretrainError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # what the OS refused anywhere, a Ray task's included; else a bug
        if (refused := os_refusal(exc)) is None:
            raise
        # a copy names its source first, the file written second (shutil's sendfile copy)
        written = refused.filename2 or refused.filename
        where = f" writing {written}" if written else ""
        remedy = USER_ERRNOS.get(refused.errno or 0, "")
        print(f"{prog}: error: {refused.strerror}{where}; {remedy}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _handle(args: argparse.Namespace) -> int:
    try:
        return int(args.handler(args) or 0)
    except Exception as exc:
        if os_refusal(exc) is not None:
            # Library threads (Ray Data's) log to their own files until the process ends: each
            # write the disk refuses would print a "--- Logging error ---" traceback around
            # the one-line error. Python's logging then drops such errors silently.
            logging.raiseExceptions = False
        raise


def run_commands(modules: Iterable[ModuleType], argv: Sequence[str] | None = None) -> int:
    """`run` on a parser of `modules`' commands alone (a proxy run's process): records and behaves
    as the same `pretrain ...` command would."""
    return run(command_parser(modules), argv)
