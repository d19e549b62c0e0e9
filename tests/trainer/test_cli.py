"""`pretrain launch` from the command line: dry run, gate refusal, layout and rendezvous errors."""

from __future__ import annotations

import pytest

from pretrain_app.cli import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_of_full_config_prints_config_torchrun_and_gate(capsys, repo_root, tmp_path):
    code, out, err = _run(
        capsys,
        "launch",
        str(repo_root / "configs" / "train_full.yaml"),
        "--dry-run",
        "--set",
        f"run.out_dir={tmp_path / 'run'}",
    )
    assert code == 2  # the same preflight as a real launch: the gate refuses, in one line
    assert "num_layers: 16" in out and "# config_sha256:" in out
    assert "trainer.local_torchrun --nproc-per-node=8 --nnodes=1" in out
    assert "--rdzv-endpoint=127.0.0.1:0" in out and "--local-addr=127.0.0.1" in out
    assert "-m trainer.worker" in out
    (line,) = err.strip().splitlines()
    assert line.startswith("pretrain launch: error:") and "ablation" in line
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_multi_node_dry_run_uses_rendezvous(capsys, repo_root):
    code, out, err = _run(
        capsys,
        "launch",
        str(repo_root / "configs" / "train_7b.yaml"),
        "--dry-run",
        "--nnodes",
        "4",
        "--rdzv-endpoint",
        "10.0.0.1:29500",
        "--rdzv-id",
        "job7",
    )
    assert code == 2 and len(err.strip().splitlines()) == 1  # preflight: no report, no data here
    assert "torch.distributed.run" in out and "local_torchrun" not in out
    assert "--nnodes=4 --max-restarts=0 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29500" in out
    assert "--rdzv-id=job7" in out and "--standalone" not in out


def test_full_run_without_a_report_is_refused_in_one_line(capsys, repo_root, tmp_path):
    code, _, err = _run(
        capsys,
        "launch",
        str(repo_root / "configs" / "train_full.yaml"),
        "--set",
        f"run.out_dir={tmp_path / 'run'}",
        "--set",
        f"gate.report_dir={tmp_path / 'no-report'}",
    )
    assert code == 2
    line = err.strip()
    assert line.startswith("pretrain launch: error:") and "\n" not in line
    assert "--override-gate" in line or "ablat" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nproc", "3", "--set", "parallel.tensor=2"], "not a multiple of tensor"),
        (["--nproc", "2", "--set", "parallel.data=1"], "parallel.data = 1 but --nproc 2 x"),
        (["--nnodes", "2"], "needs --rdzv-endpoint"),
        (["--set", "parallel.backend=nccl"], "parallel.backend = nccl needs CUDA"),
    ],
)
def test_layout_errors_are_one_line(capsys, repo_root, tmp_path, args, message):
    code, _, err = _run(
        capsys,
        "launch",
        str(repo_root / "configs" / "train_proxy.yaml"),
        "--set",
        f"run.out_dir={tmp_path}",
        *args,
    )
    assert code == 2
    assert message in err and err.count("\n") == 1
