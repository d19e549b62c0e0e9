"""`make` builds .venv with Python 3.11 only: PY missing, PY another version, or an existing
.venv made with another version each stop with one line naming the interpreter and the remedy,
before anything is created or installed. Runs the real Makefile with real make in a copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _checkout(tmp_path: Path) -> Path:
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(REPO / name, tmp_path / name)
    return tmp_path


def _interpreter(path: Path, version: str) -> Path:
    """An executable that answers the version question as a Python `version` would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


def _make(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "PY", "VIRTUAL_ENV"))}
    env["PIP_NO_INDEX"] = "1"  # never reach a registry from a test
    return subprocess.run(
        ["make", "--no-print-directory", "install", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _our_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    ours = [line for line in result.stderr.splitlines() if not line.startswith("make: ***")]
    assert len(ours) == 1, result.stderr
    return ours[0]


def test_missing_interpreter_is_one_line_and_creates_nothing(tmp_path):
    repo = _checkout(tmp_path)
    line = _our_line(_make(repo, "PY=python3.11-not-installed"))
    assert "PY=python3.11-not-installed must be Python 3.11 (found: no interpreter)" in line
    assert "make PY=/path/to/python3.11" in line
    assert not (repo / ".venv").exists()


def test_other_version_is_refused_before_the_venv_is_made(tmp_path):
    repo = _checkout(tmp_path)
    other = _interpreter(tmp_path / "bin" / "python3", "3.12")
    line = _our_line(_make(repo, f"PY={other}"))
    assert f"PY={other} must be Python 3.11 (found: 3.12)" in line
    assert not (repo / ".venv").exists()


def test_existing_venv_of_another_version_is_refused(tmp_path):
    repo = _checkout(tmp_path)
    _interpreter(repo / ".venv" / "bin" / "python", "3.10")
    line = _our_line(_make(repo, f"PY={sys.executable}"))
    assert ".venv/bin/python must be Python 3.11 (found: 3.10)" in line
    assert "make clean" in line
    assert not (repo / ".venv" / ".installed").exists()


@pytest.mark.slow  # makes a real venv (ensurepip): ~20 s here
@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the suite runs on 3.11")
def test_a_311_interpreter_gets_its_venv(tmp_path):
    repo = _checkout(tmp_path)
    result = _make(repo, f"PY={sys.executable}")
    # past the check: the venv exists and is 3.11; the install then fails offline (no index)
    assert "must be Python 3.11" not in result.stderr, result.stderr
    version = subprocess.run(
        [str(repo / ".venv" / "bin" / "python"), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.strip() == "(3, 11)"
