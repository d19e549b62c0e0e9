"""`pretrain launch` refuses before spawning (one line, exit 2, nothing written; --dry-run the
same), listens on 127.0.0.1 only for a local run, and its ranks die with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from pretrain_app.cli import main
from tests.mixtures.conftest import make_encoded, mixture_config
from tests.trainer.trainer_testlib import tiny_config

pytestmark = pytest.mark.serial

REPO = Path(__file__).resolve().parents[2]


def _mixture(tmp_path: Path) -> Path:
    from mixtures.build import build_mixture
    from mixtures.recipe import MixtureConfig
    from pretrain.config import parse_config

    encoded = make_encoded(tmp_path / "enc")
    data = mixture_config(encoded, tmp_path / "mix", total_tokens=16 * 32 * 8)
    build_mixture(parse_config(MixtureConfig, data))
    return tmp_path / "mix"


def _launch_yaml(tmp_path: Path, run_dir: Path, **sections: dict) -> Path:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(tiny_config(run_dir, **sections)))
    return path


def _mixture_sections(mixture: Path, **data: object) -> dict:
    return {
        "run": {"train_steps": None},
        "model": {"vocab_size": 60001, "seq_length": 64},
        "batch": {"micro_batch_size": 8, "global_batch_size": 16},
        "data": {"source": "mixture", "mixture_dir": str(mixture), **data},
    }


def _flip_keep_mtime(path: Path) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _refused(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pretrain launch: error:"), err
    return err[0]


@pytest.mark.timeout(240)
def test_refusals_come_before_spawning_and_write_nothing(tmp_path, capsys):
    mixture = _mixture(tmp_path)
    run_dir = tmp_path / "runs" / "run"
    pinned = _launch_yaml(
        tmp_path, run_dir, **_mixture_sections(mixture, expect_build_sha256="ab" * 32)
    )
    for extra in ([], ["--dry-run"]):
        line = _refused(capsys, ["launch", str(pinned), "--nproc", "1", *extra])
        assert "data.expect_build_sha256" in line

    sections = _mixture_sections(mixture)
    sections["run"] = {"kind": "full", "train_steps": None}
    full = _launch_yaml(tmp_path, run_dir, **sections, gate={"report_dir": str(tmp_path / "nr")})
    for extra in ([], ["--dry-run"]):
        assert "ablation" in _refused(capsys, ["launch", str(full), "--nproc", "1", *extra])

    plain = _launch_yaml(tmp_path, run_dir, **_mixture_sections(mixture))
    assert main(["launch", str(plain), "--nproc", "1", "--dry-run"]) == 0
    assert "# preflight: ok" in capsys.readouterr().out
    _flip_keep_mtime(next((tmp_path / "enc").glob("*.bin")))  # same size, mtime kept
    for extra in ([], ["--dry-run"], ["--verify", "full"]):
        line = _refused(capsys, ["launch", str(plain), "--nproc", "1", *extra])
        assert ".bin does not match its sha256" in line
    assert not (tmp_path / "runs").exists()  # no run directory, no lock file: nothing written


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = str(REPO)
    return env


def _start(tmp_path: Path, steps: int) -> subprocess.Popen:
    config = _launch_yaml(tmp_path, tmp_path / "run", run={"train_steps": steps})
    return subprocess.Popen(
        [sys.executable, "-m", "pretrain_app", "launch", str(config), "--nproc", "2"],
        env=_clean_env(),
        stdout=open(tmp_path / "launch.log", "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _descendants(root: int) -> list[psutil.Process]:
    try:
        return psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _workers(root: int) -> list[psutil.Process]:
    """The training ranks under launcher `root` (not the helpers they fork or spawn)."""
    found = []
    for proc in _descendants(root):
        try:
            if "trainer.worker" in proc.cmdline() and "local_torchrun" in " ".join(
                proc.parent().cmdline()
            ):
                found.append(proc)
        except (psutil.Error, AttributeError):
            pass
    return found


def _cmdline(proc: psutil.Process) -> str:
    """The process's command line, or "" once it has exited (a zombie's is empty)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_local_launch_listens_on_loopback_only(tmp_path):
    launcher = _start(tmp_path, steps=400)
    addresses: set[str] = set()
    try:
        started = _wait_for(lambda: len(_workers(launcher.pid)) == 2, 120)
        assert started, (tmp_path / "launch.log").read_text()[-3000:]
        tree = psutil.Process(launcher.pid)
        for _ in range(10):
            pids = {tree.pid, *(p.pid for p in tree.children(recursive=True))}
            addresses |= {
                c.laddr.ip
                for c in psutil.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN and c.pid in pids
            }
            time.sleep(0.5)
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
    assert addresses, "the run's rendezvous stores should be listening"
    assert addresses == {"127.0.0.1"}, addresses


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("target", ["process group", "launcher only"])
def test_ranks_die_with_the_launcher(tmp_path, target):
    launcher = _start(tmp_path, steps=400)
    try:
        assert _wait_for(lambda: len(_workers(launcher.pid)) == 2, 120)
        time.sleep(8)  # let the ranks reach training and start their checkpoint helpers
        # the ranks and every helper they forked or spawned (megatron's checkpoint writers)
        ranks = [p for p in _descendants(launcher.pid) if "local_torchrun" not in _cmdline(p)]
        assert len(ranks) >= 2
        if target == "process group":
            os.killpg(launcher.pid, signal.SIGKILL)
        else:
            os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
        assert _wait_for(lambda: not any(_alive(r) for r in ranks), 30)
    finally:
        for rank in locals().get("ranks", []):
            if _alive(rank):
                rank.kill()
