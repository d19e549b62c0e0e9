"""Where Ray's own CPU goes in a 2-worker data run (issue 13.4), by role, before and after a
change, on the same input in one invocation.

Input: `--pages` WARC pages repeated from CORPUS/web.warc.gz into `--files` WARC.gz files
(benchmarks.bench_pipeline_scaling.build_pages: copies of the corpus's responses, fresh URIs and
record ids). Each run is a fresh interpreter with a clean environment (no RAY_* variables) running
`data_pipeline.runner.run_pipeline` with configs/pipeline.yaml's stages at `--workers` workers.
`--variants` name the settings compared (`VARIANTS`), interleaved, `--repeat` times each.

Per run, every process of the tree is sampled every 0.5 s and each CPU delta is charged to the
role the process had AT THAT SAMPLE (a Ray worker renames itself `ray::IDLE`, `ray::<task>`,
`ray::<actor>` as it changes jobs): driver threads by name (the Ray Data executor, our progress
poller, Ray's core worker threads; this sampler's own thread is `sampler`), raylet, GCS, each
agent, Ray Data's actors, and workers by what they were doing (idle, a task, a stage actor). The
stage actors' CPU beyond the stages' own CPU (manifest `throughput`) is `actor_overhead_cpu_s`.
Start-up (ray.init, Ray Data's warm-up) is included in the sampled run; `work_s` excludes it.
Each delta is also placed in the manifest phase it fell in (`throughput.run.phase_spans`;
`before-stream` is Ray's start, the warm-up and planning): `work_cpu_s_by_role` is the CPU from
the stream's start on, and `fresh_workers_in_work` lists the worker processes first seen then,
with the CPU each spent before its first task or actor (`start_cpu_s`: Ray's process start-up
inside the measured work).
Outputs of every run are hashed (data/, rejects/, ledger.json): variants must be byte-identical.

    .venv/bin/python -m benchmarks.bench_ray_overhead --corpus DIR [--pages 2000]
        [--variants before after] [--repeat 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import add_corpus_argument, corpus_dir, write_result

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("before", "after")
"""`before`: the code of `--before REV` (a `git archive` of it, this script copied in, run from
there: its `pretrain` and `data_pipeline` are imported, the watchdog started from it);
`after`: this checkout."""
BEFORE = "4269292"
"""The main commit before the local-Ray overhead cuts (log monitor, watchdog poll)."""
TICK = os.sysconf("SC_CLK_TCK")


def proc_role(cmd: str, exe: str) -> str:
    """A fine role from a command line (see the module doc)."""
    if exe in ("raylet", "gcs_server"):
        return exe.replace("_server", "")
    for key, name in (
        ("DashboardAgent", "dashboard_agent"),
        ("dashboard/agent.py", "dashboard_agent"),
        ("RuntimeEnvAgent", "runtime_env_agent"),
        ("runtime_env/agent", "runtime_env_agent"),
        ("log_monitor.py", "log_monitor"),
        ("monitor.py", "autoscaler_monitor"),
        ("pretrain.rayreaper", "reaper"),
    ):
        if key in cmd:
            return name
    if cmd.startswith("ray::"):
        name = cmd.split(" ", 1)[0][5:]
        if name.startswith(("_StatsActor", "_Autoscaling", "AutoscalingRequester")):
            return f"ray_data_actor:{name.split('(')[0]}"
        if name == "IDLE":
            return "worker:idle"
        if "MapStagesWorker" in name or name.startswith("_MapWorker"):
            return "worker:stage_actor"
        return f"worker:task:{name[:40]}"
    if "default_worker.py" in cmd:
        return "worker:starting"
    return "other:" + cmd[:60]


def _thread_cpu(pid: int, tid: int) -> tuple[str, float] | None:
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as handle:
            stat = handle.read()
        with open(f"/proc/{pid}/task/{tid}/comm") as handle:
            comm = handle.read().strip()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return comm, (int(fields[11]) + int(fields[12])) / TICK


class RoleSampler:
    """Samples the tree below this process; charges each CPU delta to the role seen then."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.me = psutil.Process()
        self.last: dict[tuple[int, int], float] = {}
        self.by_role: dict[str, float] = {}
        self.process_s: dict[str, float] = {}
        """Per role of a child process: seconds of process life seen (samples x interval)."""
        self.started = time.time()
        self.history: dict[int, list[tuple[float, str]]] = {}
        """Per child process: (seconds since start, role) at each change of role."""
        self.pids: dict[str, set[int]] = {}
        """Per role group of a child process (`groups`): the processes seen in it."""
        self.charges: list[tuple[float, int, str, float]] = []
        """(Unix time of the sample, pid, role, CPU-s): every delta, to split by phase after."""
        self.first_seen: dict[int, float] = {}
        """Per child process: the Unix time of the sample that first saw it."""
        self._stop = threading.Event()

    def _charge(self, key: tuple[int, int], role: str, cpu: float) -> None:
        before = self.last.get(key)
        self.last[key] = cpu
        if before is not None and cpu > before:
            self.by_role[role] = self.by_role.get(role, 0.0) + cpu - before
            self.charges.append((time.time(), key[0], role, cpu - before))

    def sample(self) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        for tid in os.listdir(f"/proc/{self.me.pid}/task"):
            got = _thread_cpu(self.me.pid, int(tid))
            if got is not None:
                comm, cpu = got
                name = names.get(int(tid), comm)
                name = (
                    "sampler"
                    if name == "role-sampler"
                    else name.split("-")[0].rstrip("_0123456789")
                )
                self._charge((self.me.pid, int(tid)), f"driver:{name}", cpu)
        try:
            children = self.me.children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for proc in children:
            try:
                cmd = " ".join(proc.cmdline())
                times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
            exe = os.path.basename(cmd.split(" ", 1)[0]) if cmd else ""
            role = proc_role(cmd, exe)
            self._charge((proc.pid, 0), role, times.user + times.system)
            self.process_s[role] = self.process_s.get(role, 0.0) + self.interval
            self.pids.setdefault(role.split(":")[0], set()).add(proc.pid)
            self.first_seen.setdefault(proc.pid, time.time())
            seen = self.history.setdefault(proc.pid, [])
            if not seen or seen[-1][1] != role:
                seen.append((round(time.time() - self.started, 1), role))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> RoleSampler:
        self.sample()  # the first sample sets each known process's baseline
        self.last = {k: 0.0 if k[0] != self.me.pid else v for k, v in self.last.items()}
        self._thread = threading.Thread(target=self._loop, name="role-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def phase_of(at: float, spans: list[list[Any]]) -> str:
    """The manifest phase a Unix time falls in: `before-stream` before the first (Ray start,
    Ray Data's warm-up, planning), `end` after the last, else the span's name (or the one before
    a gap between spans)."""
    if not spans or at < spans[0][1]:
        return "before-stream"
    if at > spans[-1][2]:
        return "end"
    return [name for name, begin, _ in spans if begin <= at][-1]


def by_phase(sampler: RoleSampler, spans: list[list[Any]]) -> dict[str, Any]:
    """CPU-s by phase and role group; the work's (from the stream on) by fine role; and the worker
    processes first seen from the stream on (their phase, roles, CPU): Ray's process start-ups
    that land inside the measured work."""
    phases: dict[str, dict[str, float]] = {}
    work: dict[str, float] = {}
    per_pid: dict[int, float] = {}
    starting: dict[int, float] = {}
    """Per process: CPU-s before its first task or actor (its start: interpreter, Ray, imports,
    an actor's constructor, charged while it still showed `starting` or `idle`)."""
    started: set[int] = set()
    for at, pid, role, cpu in sampler.charges:
        phase = phase_of(at, spans)
        group = phases.setdefault(phase, {})
        group[role.split(":")[0]] = group.get(role.split(":")[0], 0.0) + cpu
        per_pid[pid] = per_pid.get(pid, 0.0) + cpu
        if role not in ("worker:starting", "worker:idle"):
            started.add(pid)
        elif pid not in started:
            starting[pid] = starting.get(pid, 0.0) + cpu
        if phase != "before-stream":
            work[role] = work.get(role, 0.0) + cpu
    fresh = [
        {
            "phase": phase_of(seen, spans),
            "roles": sorted({role for _, role in sampler.history.get(pid, [])}),
            "cpu_s": round(per_pid.get(pid, 0.0), 2),
            "start_cpu_s": round(starting.get(pid, 0.0), 2),
        }
        for pid, seen in sorted(sampler.first_seen.items(), key=lambda item: item[1])
        if phase_of(seen, spans) != "before-stream"
        and any(role.startswith("worker") for _, role in sampler.history.get(pid, []))
    ]
    return {
        "cpu_s_by_phase": {k: {g: round(c, 2) for g, c in v.items()} for k, v in phases.items()},
        "work_cpu_s_by_role": {k: round(v, 2) for k, v in sorted(work.items())},
        "work_cpu_s": round(sum(work.values()), 2),
        "fresh_workers_in_work": fresh,
        "fresh_workers_in_work_cpu_s": round(sum(f["cpu_s"] for f in fresh), 2),
        "fresh_workers_in_work_start_cpu_s": round(sum(f["start_cpu_s"] for f in fresh), 2),
    }


def digest(out: Path) -> str:
    """sha256 over the run's shards, rejects and ledger (names and bytes)."""
    hasher = hashlib.sha256()
    for path in sorted([*out.glob("data/*"), *out.glob("rejects/*"), out / "ledger.json"]):
        hasher.update(path.name.encode() + b"\0" + path.read_bytes())
    return hasher.hexdigest()


def child(inputs: str, out: str, workers: int) -> dict[str, Any]:
    import yaml

    from data_pipeline.config import PipelineConfig
    from data_pipeline.runner import run_pipeline

    stages = yaml.safe_load((REPO / "configs" / "pipeline.yaml").read_text())["stages"]
    config = PipelineConfig.model_validate(
        {
            "inputs": [inputs],
            "output": out,
            "stages": stages,
            "ray": {"num_cpus": workers, "workers": workers, "timeout_s": 900},
        }
    )
    start = time.perf_counter()
    with RoleSampler() as sampler:
        result = run_pipeline(config, progress=False)
    wall = time.perf_counter() - start
    section = result.manifest["throughput"]
    roles = {k: round(v, 2) for k, v in sorted(sampler.by_role.items())}
    stage_cpu = section["cpu_s_total"]
    from pretrain import rayinit

    return {
        "code": {"rayinit": rayinit.__file__, "local_skipped": list(rayinit.LOCAL_SKIPPED)},
        "wall_s": round(wall, 2),
        "work_s": round(wall - section["fixed"]["ray_start_s"], 2),
        "stage_cpu_s": round(stage_cpu, 2),
        "cpu_s_by_role": roles,
        "role_history": {str(k): v for k, v in sampler.history.items()},
        "processes_by_group": {k: len(v) for k, v in sorted(sampler.pids.items())},
        "process_s_by_role": {k: round(v, 1) for k, v in sorted(sampler.process_s.items())},
        "actor_overhead_cpu_s": round(roles.get("worker:stage_actor", 0.0) - stage_cpu, 2),
        **by_phase(sampler, section["run"]["phase_spans"]),
        "digest": digest(Path(out)),
    }


def groups(roles: dict[str, float]) -> dict[str, float]:
    """Roles summed by their first word (driver, worker, ray_data_actor, ...)."""
    out: dict[str, float] = {}
    for role, cpu in roles.items():
        key = role.split(":")[0]
        out[key] = round(out.get(key, 0.0) + cpu, 2)
    return out


def checkout(rev: str, target: Path) -> Path:
    """The tree of `rev` (git archive) with this script copied in."""
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    (target / "benchmarks" / Path(__file__).name).write_bytes(Path(__file__).read_bytes())
    return target


def run_once(variant: str, tree: Path, inputs: Path, out: Path, workers: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["OMP_NUM_THREADS"] = "1"
    load = os.getloadavg()[0]
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_ray_overhead", "--child"]
        + [str(inputs), str(out), str(workers)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=tree,  # `-m`: the tree's packages come first on sys.path (before the editable install)
    )
    if run.returncode != 0:
        raise RuntimeError(f"{variant} failed: {run.stderr[-3000:]}")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    result.update(variant=variant, load_1m=[round(load, 1), round(os.getloadavg()[0], 1)])
    result["by_group"] = groups(result["cpu_s_by_role"])
    print(json.dumps(result), flush=True)
    return result


def summary(runs: list[dict[str, Any]], variants: list[str]) -> dict[str, Any]:
    """Median CPU-s per role group and per fine role, per variant; whether outputs match."""
    out: dict[str, Any] = {}
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        keys = sorted({k for r in mine for k in r["cpu_s_by_role"]})
        gkeys = sorted({k for r in mine for k in r["by_group"]})
        out[variant] = {
            "runs": len(mine),
            "work_s": statistics.median(r["work_s"] for r in mine),
            "stage_cpu_s": statistics.median(r["stage_cpu_s"] for r in mine),
            "actor_overhead_cpu_s": statistics.median(r["actor_overhead_cpu_s"] for r in mine),
            "non_stage_cpu_s": statistics.median(
                sum(r["cpu_s_by_role"].values()) - r["stage_cpu_s"] for r in mine
            ),
            "work_non_stage_cpu_s": statistics.median(
                r["work_cpu_s"] - r["stage_cpu_s"] for r in mine
            ),
            "fresh_workers_in_work": [len(r["fresh_workers_in_work"]) for r in mine],
            "fresh_workers_in_work_start_cpu_s": [
                r["fresh_workers_in_work_start_cpu_s"] for r in mine
            ],
            "by_group": {
                k: statistics.median(r["by_group"].get(k, 0.0) for r in mine) for k in gkeys
            },
            "by_role": {
                k: statistics.median(r["cpu_s_by_role"].get(k, 0.0) for r in mine) for k in keys
            },
        }
    out["outputs_identical"] = len({r["digest"] for r in runs}) == 1
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    add_corpus_argument(parser)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--before", default=BEFORE, help="the commit `before` runs")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv if argv is not None else [])
    if args.child:
        inputs, out, workers = args.child
        result = child(inputs, out, int(workers))
        print(json.dumps(result))
        return result
    from benchmarks.bench_pipeline_scaling import build_pages

    source = corpus_dir(args.corpus) / "web.warc.gz"
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_overhead_") as tmp:
        inputs = Path(tmp) / "warc"
        built = build_pages(source, inputs, args.pages, args.files)
        trees = {"after": REPO}
        if "before" in args.variants:
            trees["before"] = checkout(args.before, Path(tmp) / "before")
        for number in range(args.repeat):
            for variant in args.variants:
                out = Path(tmp) / f"{variant}{number}"
                runs.append(run_once(variant, trees[variant], inputs, out, args.workers))
    result = {
        "input": {**built, "source": str(source)},
        "before": args.before,
        "workers": args.workers,
        "machine": {"cpus": os.cpu_count(), "shared": True},
        "runs": runs,
        "summary": summary(runs, args.variants),
    }
    print(json.dumps(result["summary"], indent=1))
    write_result("bench_ray_overhead", result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
