"""pretrain.program.run: what a command's failure prints."""

from __future__ import annotations

import argparse
import errno

import pytest

from pretrain.program import run


def _parser(error: BaseException, code: int = errno.ENOSPC) -> argparse.ArgumentParser:
    def handler(args: argparse.Namespace) -> int:
        try:
            raise OSError(code, "No space left on device", "/out/ledger.json")
        except OSError as exc:
            raise error from exc  # e.g. a Ray task's error holding the worker's OSError

    parser = argparse.ArgumentParser(prog="pretrain")
    parser.set_defaults(handler=handler, command="data")
    return parser


def test_a_full_disk_under_another_error_is_one_line_exit_2(capsys) -> None:
    assert run(_parser(RuntimeError("task failed")), []) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "pretrain data: error: No space left on device writing /out/ledger.json; free space"
    )


def test_any_other_error_even_another_oserror_keeps_its_traceback() -> None:
    with pytest.raises(ZeroDivisionError):
        run(_parser(ZeroDivisionError("a bug"), errno.EACCES), [])
