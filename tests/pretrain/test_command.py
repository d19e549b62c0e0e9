"""The command behind an artifact is the `pretrain ...` argv that made it, captured once in
`pretrain.program.run` (the program's `main(argv)`): right for
in-process calls (a proxy run), for nested calls, and outside the CLI (the process's own command
line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from pretrain.manifest import load_manifest, write_manifest
from pretrain.provenance import capture, current_command
from pretrain_app.cli import main
from tests.trainer.trainer_testlib import tiny_config


@pytest.mark.timeout(240)
def test_in_process_launch_records_its_own_argv(tmp_path):
    # main(argv), as evals/proxy_worker.py calls it, in a process whose own sys.argv is different
    # (its own process, so the rank's environment (MASTER_PORT, ...) does not leak into this one).
    run_dir = tmp_path / "run"
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(tiny_config(run_dir, run={"train_steps": 2})))
    argv = ["launch", str(path), "--in-process", "--set", "checkpoint.every=1"]
    code = f"import sys; from pretrain_app.cli import main; sys.exit(main({argv!r}))"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MASTER_"))}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = ["pretrain", *argv]
    assert json.loads((run_dir / "launch.json").read_text())["command"] == expected
    manifest = load_manifest(run_dir)
    assert manifest["command"] == expected
    assert manifest["config"]["checkpoint"]["every"] == 1


def test_outside_main_the_process_command_line_is_recorded():
    assert current_command() == list(sys.argv)


def test_nested_calls_record_their_own_command_and_restore_the_outer(tmp_path):
    outer, inner, after = tmp_path / "outer", tmp_path / "inner", tmp_path / "after"
    for directory in (outer, inner, after):
        directory.mkdir()
    with capture(["ablate", "cfg.yaml"]):
        with capture(["launch", "proxy.yaml", "--in-process"]):
            write_manifest(inner, "run")
        write_manifest(outer, "ablation")
    write_manifest(after, "other")
    assert load_manifest(inner)["command"] == ["pretrain", "launch", "proxy.yaml", "--in-process"]
    assert load_manifest(outer)["command"] == ["pretrain", "ablate", "cfg.yaml"]
    assert load_manifest(after)["command"] == list(sys.argv)


def test_a_failing_command_does_not_leak_into_the_next(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "missing")]) == 2
    capsys.readouterr()
    assert current_command() == list(sys.argv)


def test_the_lock_holder_record_names_the_in_process_command(tmp_path):
    from pretrain.locking import output_lock, read_holder

    out = tmp_path / "shards"
    with capture(["data", "run", "pipeline.yaml"]), output_lock(out):
        assert read_holder(out)["command"] == ["pretrain", "data", "run", "pipeline.yaml"]
