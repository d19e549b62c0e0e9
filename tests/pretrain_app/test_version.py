"""`pretrain --version` names this package and the engines results depend on, without importing
them (it stays as fast as --help)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

CHECK = """
import sys
from pretrain_app.cli import main
try:
    main(["--version"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("imported:", sorted(m for m in ("torch", "ray", "megatron") if m in sys.modules))
"""


def test_version_names_the_package_and_engines_without_importing_them() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    out = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert f"pretrain-corpus {version('pretrain-corpus')}" in out
    assert f"megatron-core {version('megatron-core')}" in out
    assert f"torch {version('torch')}" in out
    assert "imported: []" in out
