"""What installing `ray[default]` (the `cluster` extra: job server, dashboard) costs an embedded
run, which keeps `include_dashboard=False`: start-up time and the RSS / PSS of every Ray process
(GCS, raylet, its agents, the log monitor, workers) of a started Ray after a few tasks ran, and the
CPU-seconds the driver and those processes spent until then (what a test that starts Ray pays).

Each interpreter given (`--python`, default this one) runs the same probe in a subprocess with a
clean environment, `--repeat` times, interleaved; the baseline is an interpreter with plain `ray` (no
`ray[default]` extras) at the same Ray version. The probe starts Ray the way a job does,
`pretrain.rayinit.connect` (address="local", loopback only, its telemetry off, the head services
a local run skips, and its watchdog process, counted as `reaper`), imported from this checkout
through PYTHONPATH: its imports are the standard library's and psutil, so it also runs under an
interpreter where this project is not installed.

    python3.11 -m venv /tmp/raymin && /tmp/raymin/bin/pip install -c constraints.txt ray psutil
    python -m benchmarks.bench_ray_footprint --python /tmp/raymin/bin/python --python .venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import write_result

REPO = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, os, sys, time
import psutil, ray
from pretrain import rayinit

ROLES = {"dashboard/agent.py": "dashboard_agent", "runtime_env/agent/main.py": "runtime_env_agent",
         "log_monitor.py": "log_monitor", "autoscaler/_private/monitor.py": "monitor",
         "dashboard/dashboard.py": "dashboard", "raylet/raylet": "raylet",
         "gcs/gcs_server": "gcs_server", "default_worker.py": "worker",
         "pretrain.rayreaper": "reaper"}

def role(argv):
    if argv and argv[0].startswith("ray::"):
        return "worker"
    head = " ".join(argv[:3])  # the program, never its arguments (the raylet's name the agents)
    return next((r for key, r in ROLES.items() if key in head), "other:" + head[-60:])

try:
    import aiohttp_cors, opencensus, prometheus_client  # noqa: F401  the ray[default] extras
    extras = True
except ImportError:
    extras = False
started = time.perf_counter()
rayinit.connect(None, num_cpus=2, object_store_mb=200)
start_s = time.perf_counter() - started

@ray.remote
def pid():
    time.sleep(0.2)
    return os.getpid()

ray.get([pid.remote() for _ in range(4)])
time.sleep(float(sys.argv[1]))
rows = []
for proc in psutil.Process().children(recursive=True):
    try:
        argv = proc.cmdline()
        mem = proc.memory_full_info()
        cpu = proc.cpu_times()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        continue
    rows.append({"role": role(argv), "rss_mb": mem.rss / 2**20, "pss_mb": mem.pss / 2**20,
                 "cpu_s": cpu.user + cpu.system})
me = psutil.Process().cpu_times()
rayinit.shutdown(True)
print(json.dumps({"ray": ray.__version__, "extras": extras, "start_s": start_s, "procs": rows,
                  "driver_cpu_s": me.user + me.system}))
"""


def probe(python: str, settle_s: float) -> dict[str, Any]:
    """One embedded start of Ray under `python`, in a clean environment and a fresh HOME."""
    with tempfile.TemporaryDirectory(prefix="rayfp-") as home:
        env = {
            "PATH": f"{Path(python).parent}:/usr/bin:/bin",
            "HOME": home,
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(REPO),  # pretrain.rayinit from this checkout (module docstring)
        }
        done = subprocess.run(
            [python, "-c", PROBE, str(settle_s)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"probe under {python} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over runs: start-up, total RSS/PSS of Ray's processes, per role (summed)."""
    roles: dict[str, list[dict[str, float]]] = {}
    totals = []
    for run in runs:
        per: dict[str, dict[str, float]] = {}
        for row in run["procs"]:
            entry = per.setdefault(row["role"], {"processes": 0, "rss_mb": 0.0, "pss_mb": 0.0})
            entry["processes"] += 1
            for key in ("rss_mb", "pss_mb", "cpu_s"):
                entry[key] = entry.get(key, 0.0) + row[key]
        for name, entry in per.items():
            roles.setdefault(name, []).append(entry)
        procs = run["procs"]
        totals.append(
            (
                sum(r["rss_mb"] for r in procs),
                sum(r["pss_mb"] for r in procs),
                sum(r["cpu_s"] for r in procs) + run["driver_cpu_s"],
            )
        )
    med = statistics.median
    return {
        "ray": runs[0]["ray"],
        "ray_default_extras": runs[0]["extras"],
        "runs": len(runs),
        "start_s": round(med(r["start_s"] for r in runs), 2),
        "total_rss_mb": round(med(t[0] for t in totals), 1),
        "total_pss_mb": round(med(t[1] for t in totals), 1),
        "cpu_s_driver_and_ray": round(med(t[2] for t in totals), 2),
        "by_role": {
            name: {key: round(med(e[key] for e in entries), 1) for key in entries[0]}
            for name, entries in sorted(roles.items())
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", help="interpreter(s) to probe")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=3.0)
    args = parser.parse_args(argv)
    pythons = args.python or [sys.executable]
    result: dict[str, Any] = {"machine": f"{os.cpu_count()} cores, shared", "interpreters": {}}
    runs: dict[str, list[dict[str, Any]]] = {python: [] for python in pythons}
    for _ in range(args.repeat):  # interleaved: a load swing hits every interpreter alike
        for python in pythons:
            runs[python].append(probe(python, args.settle_s))
    for python in pythons:
        summary = summarise(runs[python])
        result["interpreters"][python] = summary
        extras = "ray[default]" if summary["ray_default_extras"] else "ray (minimal)"
        print(
            f"{python}: {extras} {summary['ray']}: start {summary['start_s']} s, Ray processes "
            f"{summary['total_rss_mb']} MB RSS / {summary['total_pss_mb']} MB PSS, "
            f"{summary['cpu_s_driver_and_ray']} CPU-s (driver + Ray processes)"
        )
        for name, entry in summary["by_role"].items():
            print(f"  {name:18s} {entry}")
    path = write_result("ray_footprint", result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
