"""The type-check baseline is a ratchet: a new mypy error fails, an accepted one passes, a fixed one
fails until --shrink drops it, and --shrink never accepts a new error."""

from __future__ import annotations

from collections import Counter

import pytest

from tools.typecheck import check, read_baseline, write_baseline

pytestmark = pytest.mark.timeout(120)

BAD = 'count: int = "three"\n'
WORSE = BAD + "def f() -> str:\n    return 1\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mod.py").write_text(BAD)
    return tmp_path


def _check(project, shrink=False):
    args = ["mod.py", "--config-file", "", "--cache-dir", str(project / "cache")]
    return check(project / "baseline.txt", shrink, args)


def test_a_new_error_fails_and_names_its_line(project, capsys) -> None:
    assert _check(project) == 1
    out = capsys.readouterr().out
    assert "mod.py:1: error: Incompatible types in assignment" in out and "1 new" in out


def test_an_accepted_error_passes_and_a_second_one_does_not(project, capsys) -> None:
    entry = (
        'mod.py: Incompatible types in assignment (expression has type "str", variable has type '
        '"int")  [assignment]'
    )
    write_baseline(project / "baseline.txt", Counter([entry]))
    assert _check(project) == 0
    (project / "mod.py").write_text(WORSE)
    assert _check(project) == 1
    assert "mod.py:3: error: Incompatible return value type" in capsys.readouterr().out


def test_a_fixed_error_fails_until_shrunk_and_shrink_accepts_nothing(project, capsys) -> None:
    assert _check(project) == 1  # learn the entry the way a developer would: from the output
    entry = capsys.readouterr().out.splitlines()[0].replace("mod.py:1: error: ", "mod.py: ")
    write_baseline(project / "baseline.txt", Counter([entry]))
    (project / "mod.py").write_text("count: int = 3\n")
    assert _check(project) == 1
    assert "no longer occur" in capsys.readouterr().out
    assert _check(project, shrink=True) == 0
    assert sum(read_baseline(project / "baseline.txt").values()) == 0
    (project / "mod.py").write_text(WORSE)
    assert _check(project, shrink=True) == 1
    assert sum(read_baseline(project / "baseline.txt").values()) == 0
