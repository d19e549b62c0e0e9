"""Every `pretrain` command reaches its code in one hop: the handler the parser holds for it is a
module-level function of the `cli.py` that registered the command (so go-to-definition on the
handler lands in that file), not a lambda, partial, closure or a function defined elsewhere; and
the program's parser holds exactly the commands the packages' `cli` modules register."""

from __future__ import annotations

import argparse
import functools
import inspect
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pretrain.program import add_command, command_parser
from pretrain_app.cli import build_parser, package_clis

ROOT = Path(__file__).resolve().parents[2]


def _leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command path, parser) for every runnable command under `parser`."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaves(child, (*path, name))


def one_hop_problems(module: types.ModuleType) -> list[str]:
    """What keeps a command `module` registers from reaching its code in one hop."""
    problems = []
    for path, leaf in _leaves(command_parser([module])):
        name, handler = " ".join(path), leaf.get_default("handler")
        if not inspect.isfunction(handler):
            problems.append(f"{name}: handler {handler!r} is not a plain function")
            continue
        where = f"{handler.__module__}.{handler.__qualname__}"
        if handler.__module__ != module.__name__ or handler.__qualname__ != handler.__name__:
            problems.append(
                f"{name}: handler {where} is not defined at the top of {module.__name__}"
            )
        elif getattr(module, handler.__name__, None) is not handler:
            problems.append(f"{name}: {where} is not the module's own {handler.__name__}")
        if handler.__closure__:
            problems.append(f"{name}: handler {where} is a closure")
        if leaf.get_default("command_path") != list(path):
            problems.append(f"{name}: registered as {leaf.get_default('command_path')}")
    return problems


def test_there_are_commands_and_each_cli_module_is_its_packages_cli_py() -> None:
    modules = package_clis()
    packages = [m.__name__.removesuffix(".cli") for m in modules]
    assert [m.__name__ for m in modules] == [f"{p}.cli" for p in packages]
    assert packages == [
        "pretrain",
        "data_pipeline",
        "tokenizer",
        "mixtures",
        "trainer",
        "evals",
    ]
    for module, package in zip(modules, packages, strict=True):
        assert Path(inspect.getfile(module)) == ROOT / package / "cli.py"


@pytest.mark.parametrize("module", package_clis(), ids=lambda m: m.__name__)
def test_every_command_reaches_its_handler_in_its_cli_py_in_one_hop(module) -> None:
    assert list(_leaves(command_parser([module]))), f"{module.__name__} registers no command"
    assert one_hop_problems(module) == []


def test_the_program_holds_exactly_the_commands_the_cli_modules_register() -> None:
    expected = {}
    for module in package_clis():
        for path, leaf in _leaves(command_parser([module])):
            assert path not in expected, f"{' '.join(path)} is registered twice"
            expected[path] = leaf.get_default("handler")
    program = {path: leaf.get_default("handler") for path, leaf in _leaves(build_parser())}
    assert program == expected
    # the commands the README's walkthrough (`make demo`) relies on
    for path in [("verify",), ("data", "run"), ("launch",), ("eval", "run")]:
        assert path in program


def _planted(register: Any) -> types.ModuleType:
    module = types.ModuleType("toy.cli")

    def handler(args: argparse.Namespace) -> int:
        return 0

    handler.__module__, handler.__qualname__ = "toy.cli", "handler"
    module.handler = handler  # type: ignore[attr-defined]
    module.register = functools.partial(register, module)  # type: ignore[attr-defined]
    return module


def _good(module: types.ModuleType, sub: Any) -> None:
    add_command(sub, ["fine"], module.handler, "a module-level handler")


def _lambda(module: types.ModuleType, sub: Any) -> None:
    add_command(sub, ["anon"], lambda args: module.handler(args), "one hop too many")


def _partial(module: types.ModuleType, sub: Any) -> None:
    add_command(sub, ["part"], functools.partial(module.handler), "a partial")


def _foreign(module: types.ModuleType, sub: Any) -> None:
    from pretrain import cli as pretrain_cli

    add_command(sub, ["borrowed"], pretrain_cli._verify, "someone else's handler")


def _wrong_path(module: types.ModuleType, sub: Any) -> None:
    add_command(sub, ["other"], module.handler, "registered under another name")
    sub.choices["other"].set_defaults(command_path=["elsewhere"])


@pytest.mark.parametrize(
    ("register", "expected"),
    [
        (
            _lambda,
            "anon: handler tests.pretrain_app.test_commands._lambda.<locals>.<lambda> is "
            "not defined at the top of toy.cli",
        ),
        (_partial, "part: handler functools.partial("),
        (_foreign, "borrowed: handler pretrain.cli._verify is not defined at the top of toy.cli"),
        (_wrong_path, "other: registered as ['elsewhere']"),
    ],
)
def test_a_handler_more_than_one_hop_away_is_found(register, expected) -> None:
    assert one_hop_problems(_planted(_good)) == []
    problems = one_hop_problems(_planted(register))
    assert any(p.startswith(expected) for p in problems), problems


def test_python_dash_m_runs_the_program() -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    out = subprocess.run(
        [sys.executable, "-m", "pretrain_app", "--help"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    for command in ("verify", "data", "launch", "ablate", "eval"):
        assert command in out.stdout
