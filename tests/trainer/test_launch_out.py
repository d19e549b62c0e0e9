"""`pretrain launch` into a folder that is not one of our runs: one line (exit 2) before anything
is written, the folder's bytes unchanged. Before, a launch into a user's folder appended to its
metrics.jsonl and replaced its launch.json and loss.png (and `--smoke`, `--in-process` and
ranks started without the launcher the same). A run folder of ours still resumes
(tests/trainer/test_resume_*.py run in such folders)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pretrain.errors import PretrainError
from tests.conftest import clean_env
from tests.trainer.trainer_testlib import tiny_config
from trainer.run_outputs import check_run_dir

REPO = Path(__file__).resolve().parents[2]


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file below `root` (dot-files included) and every folder, by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


def _user_folder(tmp_path: Path) -> Path:
    """Someone else's folder holding files named like a run's (VS Code's launch.json, another
    trainer's metrics.jsonl, a loss plot)."""
    user = tmp_path / "user"
    (user / "tensorboard").mkdir(parents=True)
    (user / "tensorboard" / "events.out").write_bytes(b"their events")
    (user / "checkpoints").mkdir()
    (user / "checkpoints" / "epoch=3.ckpt").write_bytes(b"their weights")
    (user / "launch.json").write_text('{"version": "0.2.0", "configurations": []}\n')
    (user / "metrics.jsonl").write_text('{"epoch": 1, "val_acc": 0.9}\n')
    (user / "loss.png").write_bytes(b"\x89PNG their plot")
    (user / "notes.md").write_text("my notes\n")
    return user


def _launch(tmp_path: Path, out_dir: Path | str, *extra: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in its own process, in a clean environment, in `tmp_path`."""
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(tiny_config(out_dir, run={"train_steps": 2})))
    env = {**clean_env(), "PYTHONPATH": str(REPO), "PRETRAIN_CACHE": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "pretrain_app", "launch", str(config), "--nproc", "1", *extra]
    return subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("pretrain launch: error: run.out_dir"), lines
    return lines[0]


@pytest.mark.timeout(600)
def test_launch_refuses_a_foreign_folder_and_writes_nothing(tmp_path: Path) -> None:
    user = _user_folder(tmp_path / "home")
    before = _snapshot(user)
    for extra in ([], ["--dry-run"], ["--in-process"], ["--smoke"]):
        line = _one_line(_launch(tmp_path, user, *extra))
        assert str(user) in line and "not empty" in line and "launch.json" in line, line
        assert _snapshot(user) == before, extra  # no .logs/, no smoke/, nothing appended
        assert os.listdir(tmp_path / "home") == ["user"], extra  # no lock file beside it


@pytest.mark.timeout(300)
def test_a_file_as_out_dir_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_bytes(b"not a directory\n")
    assert "is a file" in _one_line(_launch(tmp_path, afile))
    assert "is below the file" in _one_line(_launch(tmp_path, afile / "run", "--dry-run"))
    assert afile.read_bytes() == b"not a directory\n"
    assert "is a URL" in _one_line(_launch(tmp_path, "s3://bucket/run"))  # was a folder `s3:`
    assert "is empty" in _one_line(_launch(tmp_path, "", "--dry-run"))  # was the current folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "train.yaml"]


@pytest.mark.timeout(300)
def test_a_rank_in_this_process_refuses_a_foreign_folder(tmp_path: Path) -> None:
    """The function every rank runs (trainer.worker.run), here in this process as `--in-process`
    and the ablation's proxies run it, without the launcher's check: refused before its first
    write."""
    from pretrain.config import parse_config
    from trainer.config import TrainConfig
    from trainer.worker import run

    user = _user_folder(tmp_path)
    before = _snapshot(user)
    config = parse_config(TrainConfig, tiny_config(user, run={"train_steps": 2}))
    with pytest.raises(PretrainError, match="not empty"):
        run(config)
    assert _snapshot(user) == before


@pytest.mark.timeout(300)
def test_a_rank_started_without_the_launcher_writes_nothing_in_a_foreign_folder(tmp_path: Path):
    """`python -m trainer.worker CONFIG.json` (what torchrun starts): refused in one line, and its
    launch/error.txt (for the launcher) is not written into the user's own launch/ folder."""
    user = _user_folder(tmp_path)
    _write(user / "launch" / "run.sh", "srun train.sh\n")
    before = _snapshot(user)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_config(user)))
    env = {**clean_env(), "PYTHONPATH": str(REPO), "PRETRAIN_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.worker", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("pretrain launch: error: run.out_dir")
    assert _snapshot(user) == before


@pytest.mark.timeout(300)
def test_context_parallel_is_refused_before_torchrun(tmp_path: Path, capsys) -> None:
    """Plan-only: the ranks refused it, but only after torchrun had started and the launcher had
    written the run folder; now the preflight refuses it (--dry-run too), nothing written."""
    from pretrain_app.cli import main

    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(tiny_config(tmp_path / "run", parallel={"context": 2})))
    for extra in ([], ["--dry-run"]):
        capsys.readouterr()
        assert main(["launch", str(config), "--nproc", "2", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "parallel.context > 1 is plan-only" in err[0], err
    assert not (tmp_path / "run").exists()


def _write(path: Path, text: str) -> None:
    """A file, or a folder when the name ends in '/'."""
    if str(path).endswith("/") or text == "/":
        path.mkdir(parents=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


OWN_STATES = {
    "killed after opening metrics.jsonl": {"metrics.jsonl": ""},
    "a mixture run with metrics": {"metrics.jsonl": '{"loss": 5.1, "step": 1}\n'},
    "an event first": {"metrics.jsonl": '{"event": "checkpoint_skipped"}\n', "notes.md": "x"},
    "the launcher's files": {"launch/config.json": "{}", "launch.json": ""},
    "a checkpoint only": {"checkpoints/iter_0000002/state.json": "{}", "loss.png": ""},
    "a checkpoint being written": {"checkpoints/iter_0000004.tmp/x": ""},
    "a finished run": {"manifest.json": json.dumps({"kind": "run", "files": {}})},
    "only a smoke run": {"smoke/launch.json": json.dumps({"torchrun": [], "config_sha256": ""})},
    "logs, a lock and temp files": {".logs/a.log": "", ".smoke.lock": "", ".x.json.1.tmp": ""},
}


@pytest.mark.parametrize("files", OWN_STATES.values(), ids=OWN_STATES.keys())
def test_our_own_run_folders_pass(tmp_path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        _write(tmp_path / "run" / name, text)
    check_run_dir(tmp_path / "run")


FOREIGN = {
    "another artifact": (
        {"manifest.json": json.dumps({"kind": "mixture", "files": {}})},
        "'mixture'",
    ),
    "their launch.json": ({"launch.json": '{"version": "0.2.0"}'}, "not empty"),
    "their metrics.jsonl": ({"metrics.jsonl": '{"epoch": 1}\n'}, "not empty"),
    "metrics not JSON": ({"metrics.jsonl": "step,loss\n1,5.0\n"}, "not empty"),
    "their launch/": ({"launch/run.sh": "srun ..."}, "not empty"),
    "their checkpoints/": ({"checkpoints/epoch=3.ckpt": ""}, "not empty"),
    "their data/": ({"data/train.csv": ""}, "not empty"),
    "their smoke/": ({"smoke/test.py": ""}, "not empty"),
    "loss.png and summary.json": ({"loss.png": "", "summary.json": "{}"}, "not empty"),
    "empty folders of our names": ({"launch": "/", "data": "/", "checkpoints": "/"}, "not empty"),
}


@pytest.mark.parametrize("files,says", FOREIGN.values(), ids=FOREIGN.keys())
def test_foreign_folders_are_refused(tmp_path: Path, files: dict[str, str], says: str) -> None:
    for name, text in files.items():
        _write(tmp_path / "run" / name, text)
    with pytest.raises(PretrainError, match=says) as refused:
        check_run_dir(tmp_path / "run")
    assert "\n" not in str(refused.value) and "run.out_dir" in str(refused.value)


def test_a_new_or_empty_folder_passes(tmp_path: Path) -> None:
    check_run_dir(tmp_path / "new" / "run")
    (tmp_path / "empty").mkdir()
    check_run_dir(tmp_path / "empty")
    assert os.listdir(tmp_path) == ["empty"]
