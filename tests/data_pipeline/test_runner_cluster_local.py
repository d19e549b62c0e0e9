"""The embedded (local) Ray of `pretrain data run`, as a user meets it from a fresh shell: it
listens on loopback only, and a SIGKILLed driver takes every Ray process it started with it."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.data_pipeline.raytools import (
    DATA,
    REPO,
    alive,
    clean_env,
    data_run,
    listening,
    ray_processes,
    wait_gone,
)

pytestmark = pytest.mark.serial

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _big_jsonl(path: Path, docs: int) -> Path:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    with path.open("w") as f:
        for i in range(docs):
            text = " ".join(words[(i * 7 + j * 3) % len(words)] + str(j % 13) for j in range(120))
            f.write(json.dumps({"id": str(i), "text": f"Document {i}. {text}."}) + "\n")
    return path


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_local_ray_listens_on_loopback_only(tmp_path: Path) -> None:
    config = {"inputs": [str(DATA)], "output": str(tmp_path / "out"), "ray": {"num_cpus": 2}}
    run = subprocess.Popen(
        data_run(config, tmp_path / "p.yaml"),
        cwd=REPO,
        env=clean_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    driver, seen = psutil.Process(run.pid), set()
    while run.poll() is None:
        seen |= listening([driver, *ray_processes(driver)])
        time.sleep(0.2)
    out, err = run.communicate()
    assert run.returncode == 0, err[-2000:]
    assert "docs in" in out
    names = {name for name, _, _ in seen}
    assert {"gcs_server", "raylet"} <= names, seen  # the sampling saw Ray's servers
    exposed = sorted(s for s in seen if s[1] not in LOOPBACK)
    assert not exposed, f"listening beyond loopback: {exposed}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkilled_driver_leaves_no_ray_process(tmp_path: Path) -> None:
    inputs = _big_jsonl(tmp_path / "docs.jsonl", 40_000)
    config = {"inputs": [str(inputs)], "output": str(tmp_path / "out"), "ray": {"num_cpus": 2}}
    run = subprocess.Popen(
        data_run(config, tmp_path / "p.yaml"),
        cwd=REPO,
        env=clean_env(tmp_path / "home"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    driver = psutil.Process(run.pid)
    procs: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and run.poll() is None:  # until the stage actors run
        procs.update({p.pid: p for p in ray_processes(driver)})
        names = [p.name() for p in alive(list(procs.values()))]
        if any("MapStagesWorker" in n for n in names) and any("Agent" in n for n in names):
            break
        time.sleep(0.2)
    assert run.poll() is None, "the job ended before it could be killed mid-run"
    procs.update({p.pid: p for p in ray_processes(driver)})
    run.send_signal(signal.SIGKILL)
    run.wait(30)
    left = wait_gone(list(procs.values()), 20.0)
    assert not left, f"still alive 20 s after the driver died: {[p.pid for p in left]}"
    assert not (tmp_path / "out" / "manifest.json").exists()


QUIET_PROBE = """
import json, sys
import psutil, ray
from pretrain import rayinit
rayinit.connect(None, num_cpus=1)
config = ray._private.state.state.get_system_config()
rayinit.warm_ray_data()
named = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True))
env = []  # the raylet's: its agents inherit it (theirs is unreadable once they set their title)
scripts = []  # what each Python process of Ray runs
for proc in psutil.Process().children(recursive=True):
    try:
        cmd = proc.cmdline()
        if cmd[0].endswith("raylet"):
            env.append(proc.environ().get("REPORTER_UPDATE_INTERVAL_MS"))
        scripts += [arg.split("site-packages/")[-1] for arg in cmd[1:] if arg.endswith(".py")]
    except (psutil.NoSuchProcess, psutil.ZombieProcess, IndexError):
        pass
sessions = [p.name for p in (__import__("pathlib").Path(__import__("tempfile").gettempdir())
            / "ray").glob("session_2*")]
print(json.dumps({"config": config, "raylet_env": env, "named": named, "scripts": scripts,
                  "sessions": sessions,
                  "driver_env": sorted(__import__("os").environ)}))
rayinit.shutdown(True)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_local_ray_records_no_telemetry_nobody_reads(tmp_path: Path) -> None:
    """No dashboard, so no metrics, task events or 5-second process stats (their CPU competed
    with the workers on 2 cores); the driver's own environment is left as it was. Ray Data's
    per-driver stats actor is started with Ray (warm_ray_data), before any job's stream. Nor
    does it start the dashboard's API server (`ray.init` waited for it) or the autoscaler's
    monitor (polling the GCS every second), nor the log monitor (tailing every worker's log ten
    times a second for a driver that never prints them): nothing of a local run uses them, and
    Ray Data's job above still ran. A cluster a `ray start` on this machine recorded in Ray's temp dir
    (`ray_current_cluster`, which a plain `ray.init()` joins) is not joined: a local run's Ray
    is its own."""
    temp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths
    (temp / "ray").mkdir()
    (temp / "ray" / "ray_current_cluster").write_text("192.0.2.2:16379")  # TEST-NET: nobody
    try:
        run = subprocess.run(
            [sys.executable, "-c", QUIET_PROBE],
            cwd=REPO,
            env=clean_env(tmp_path / "home", TMPDIR=str(temp)),
            capture_output=True,
            text=True,
            timeout=290,
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["config"]["enable_metrics_collection"] is False
    assert seen["config"]["task_events_report_interval_ms"] == 0
    assert seen["raylet_env"] == ["60000"], seen["raylet_env"]
    assert "REPORTER_UPDATE_INTERVAL_MS" not in seen["driver_env"]
    assert "datasets_stats_actor" in seen["named"], seen["named"]
    # (the raylet_env check above shows the probe walked Ray's processes)
    assert "ray/_private/log_monitor.py" not in seen["scripts"], seen["scripts"]
    assert "ray/dashboard/dashboard.py" not in seen["scripts"], seen["scripts"]
    assert "ray/autoscaler/_private/monitor.py" not in seen["scripts"], seen["scripts"]
    assert seen["sessions"], "the probe's Ray did not start in its own temp dir"
