"""Ray's own CPU while a job runs (issue 13.4): what the embedded Ray costs per second of a job,
with its telemetry off (`pretrain.rayinit.QUIET_LOCAL`, what `connect` does) against Ray's
defaults (metrics, task events, the agent's 5-second process stats), interleaved runs.

Each run is a fresh interpreter with a clean environment that starts Ray through
`pretrain.rayinit.connect(None, num_cpus=2)` and runs a Ray Data job whose two actors only sleep
(`--seconds` of wall, whatever the machine's load): every CPU-second the process tree spends
during it (driver, GCS, raylet, agents, monitors, Ray Data's actors, the sleeping workers' own
threads) is Ray's overhead, the CPU a 2-core machine then lacks for the stage work. Start-up is
excluded (CPU counted from the job's start to its end). Reported: CPU-seconds per second of job
by role, per run, and the median per setting.

    .venv/bin/python -m benchmarks.bench_ray_idle_cpu [--seconds 30] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import write_result

REPO = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys, time
import psutil, ray, ray.data
from pretrain import rayinit

seconds, telemetry = float(sys.argv[1]), sys.argv[2] == "on"
extra = {"_system_config": {"enable_metrics_collection": True,
                            "task_events_report_interval_ms": 1000}} if telemetry else {}
rayinit.connect(None, num_cpus=2, **extra)
ray.get([ray.remote(lambda: 1).remote() for _ in range(2)])
me = psutil.Process()

def role(proc):
    argv = proc.cmdline()
    name = argv[0] if argv else ""
    if proc.pid == me.pid:
        return "driver"
    for key, label in (("gcs_server", "gcs"), ("raylet/raylet", "raylet"),
                       ("DashboardAgent", "dashboard_agent"), ("RuntimeEnvAgent", "runtime_env_agent"),
                       ("log_monitor.py", "log_monitor"), ("monitor.py", "autoscaler_monitor"),
                       ("dashboard.py", "dashboard_head"), ("rayreaper", "reaper")):
        if key in " ".join(argv[:3]):
            return label
    if name.startswith(("ray::_StatsActor", "ray::_Autoscaling", "ray::AutoscalingRequester",
                        "ray::ActorLocationTracker")):
        return "ray_data_actor"
    return "worker"

def snapshot():
    seen = {}
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            seen[proc.pid] = (role(proc), t.user + t.system)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            pass
    return seen

class Sleep:
    def __call__(self, batch):
        time.sleep(1.0)
        return batch

before, start = snapshot(), time.perf_counter()
blocks = int(seconds) * 2
ray.data.range(blocks, override_num_blocks=blocks).map_batches(
    Sleep, batch_size=None, concurrency=2).materialize()
wall = time.perf_counter() - start
after = snapshot()
by_role = {}
for pid, (name, cpu) in after.items():
    by_role[name] = by_role.get(name, 0.0) + cpu - before.get(pid, (name, 0.0))[1]
print(json.dumps({"wall_s": wall, "cpu_s": by_role}))
rayinit.shutdown(True)
"""


def run_once(seconds: float, telemetry: str) -> dict[str, Any]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "OMP_NUM_THREADS": "1",
    }
    if telemetry == "on":
        env["REPORTER_UPDATE_INTERVAL_MS"] = "5000"  # Ray's default (connect sets it if unset)
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(seconds), telemetry],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    if run.returncode != 0:
        raise RuntimeError(run.stderr[-3000:])
    result = json.loads(run.stdout.strip().splitlines()[-1])
    wall = result["wall_s"]
    rates = {k: round(v / wall, 4) for k, v in sorted(result["cpu_s"].items())}
    rates["total"] = round(sum(result["cpu_s"].values()) / wall, 4)
    out = {"telemetry": telemetry, "wall_s": round(wall, 2), "cpu_s_per_s": rates}
    print(json.dumps(out), flush=True)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv if argv is not None else [])
    runs = [run_once(args.seconds, t) for _ in range(args.repeat) for t in ("off", "on")]
    median = {
        t: statistics.median(r["cpu_s_per_s"]["total"] for r in runs if r["telemetry"] == t)
        for t in ("off", "on")
    }
    result = {
        "runs": runs,
        "median_total_cpu_s_per_s": median,
        "machine": {"cpus": os.cpu_count(), "shared": True, "load_1m": os.getloadavg()[0]},
    }
    print(json.dumps(median))
    write_result("bench_ray_idle_cpu", result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
