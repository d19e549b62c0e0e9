"""Where a 2-worker data run leaves a core idle, phase by phase (issue 13.4), before and after a
change, on the same input in one invocation.

Input: `--pages` WARC pages repeated from CORPUS/web.warc.gz into `--files` WARC.gz files
(benchmarks.bench_pipeline_scaling.build_pages: copies of the corpus's responses, fresh URIs and
record ids). Each run is a fresh interpreter with a clean environment (no RAY_* variables) running
`data_pipeline.runner.run_pipeline` with configs/pipeline.yaml's stages at `--workers` workers
(a local Ray of that many CPUs). `before` runs a `git archive` of `--before REV` with this script
copied in; `after` runs this checkout; interleaved, `--repeat` times each.

Every process of the run's tree is sampled every `--interval` s (benchmarks.proctree) and its CPU
is put into 1-s bins, by role: `worker` (Ray workers: stage actors, read / map / join / merge
tasks), `driver` (this interpreter: planning, the global stages' aggregation, the manifest) and
`system` (raylet, GCS, agents, Ray Data's actors, the watchdog). The bins are cut by the runner's
phase spans (manifest `throughput.run.phase_spans`), with the time outside any span named too:
`start` (Ray's start and the planning before the stream), `gap:<a>><b>` (the driver between two
phases), `end` (after the merge: ledger, manifest, Ray's shutdown). The stream is split in two:
`stream-tail` begins after the last second in which the workers used more than `cores - 0.5`
cores (the last parts, when fewer reads and actors have work than there are cores).

Per phase: wall, CPU by role, and `idle_core_s` = the sum over its bins of max(0, cores - CPU of
the whole tree in the bin): core-seconds nothing of ours ran on. The machine's own busy time is
sampled too (/proc/stat): `others_cpu_s` is what other users' processes took in the phase and
`free_core_s` = max(0, cores - max(ours, machine)) per bin, the core-seconds nobody used: on a
shared machine `free_core_s` is the part of `idle_core_s` that is ours (a serial phase), the rest
other users took (then our wall stretches with their load; compare runs at similar load).
What holds on a loaded machine too: every `--interval` s the runnable threads (state R: running
or waiting for a CPU) of every process of ours are counted, and `unwanted_core_s` = the sum over
the bins of max(0, cores - mean runnable threads): core-seconds the run had nothing to run on, a
serial phase's one idle core per second of its wall (other users' load stretches those seconds,
so compare A/B interleaved on the same input). The table prints unwanted / idle / wall.
Outputs of every run are hashed (data/, rejects/, ledger.json): the variants must be identical.

    .venv/bin/python -m benchmarks.bench_scaling_timeline --corpus DIR [--pages 2000]
        [--files 8] [--workers 2] [--repeat 1] [--before REV] [--variants before after]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import add_corpus_argument, corpus_dir, write_result

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("before", "after")
BEFORE = "5cdb766"
"""main before this session's scheduling changes."""
ROLES = ("worker", "driver", "system")
ACTIVE = 0.25
"""A worker process is active in a bin where it used more than this many CPU-seconds."""


def _group(role: str) -> str:
    return role if role in ("worker", "driver") else "system"


def bins(procs: dict[int, Any], start: float, end: float) -> list[dict[str, float]]:
    """CPU-seconds per 1-s bin from `start`, by role group (a process's series is a step
    function of its CPU time; each sample's delta is spread evenly since the sample before)."""
    count = max(1, math.ceil(end - start))
    out = [{**dict.fromkeys(ROLES, 0.0), "active_workers": 0.0} for _ in range(count)]
    for stats in procs.values():
        group = _group(stats.role)
        mine = [dict.fromkeys(ROLES, 0.0) for _ in range(count)]
        previous: tuple[float, float] | None = None
        for when, cpu in stats.series:
            if previous is not None and cpu > previous[1]:
                _spread(mine, group, previous[0] - start, when - start, cpu - previous[1])
            previous = (when, cpu)
        for total, own in zip(out, mine, strict=True):
            total[group] += own[group]
            total["active_workers"] += group == "worker" and own[group] > ACTIVE
    return out


def machine_bins(samples: list[tuple[float, float]], start: float, count: int) -> list[float]:
    """Busy CPU-seconds of the whole machine (every user, /proc/stat) per 1-s bin."""
    out = [{"machine": 0.0} for _ in range(count)]
    for (t0, busy0), (t1, busy1) in zip(samples, samples[1:], strict=False):
        _spread(out, "machine", t0 - start, t1 - start, max(0.0, busy1 - busy0))
    return [b["machine"] for b in out]


def machine_busy_s() -> float:
    """CPU-seconds the machine has been busy (all but idle and iowait) since boot."""
    with open("/proc/stat") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def runnable_threads(pids: list[int]) -> dict[int, int]:
    """pid -> how many of its threads are running or waiting for a CPU (state R) now."""
    out: dict[int, int] = {}
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        count = 0
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as handle:
                    stat = handle.read()
            except OSError:
                continue
            count += stat[stat.rindex(")") + 2] == "R"
        if count:
            out[pid] = count
    return out


class DemandSampler:
    """Runnable threads of every process of the tree below this one, every `interval` s: how
    many cores the run could use at that moment, whatever other users' load gives it."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.samples: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(self.interval):
            try:
                pids = [me.pid, *(p.pid for p in me.children(recursive=True))]
            except psutil.Error:
                continue
            found = runnable_threads(pids)
            found[me.pid] = found.get(me.pid, 0) - 1  # this sampler's own thread
            self.samples.append((time.time(), found))

    def __enter__(self) -> DemandSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def demand_bins(
    demand: DemandSampler, procs: dict[int, Any], start: float, count: int
) -> list[dict[str, float]]:
    """Per 1-s bin, the mean runnable threads of ours by role group (`want_<group>`)."""
    sums = [dict.fromkeys(ROLES, 0.0) for _ in range(count)]
    seen = [0] * count
    for when, found in demand.samples:
        index = int(when - start)
        if not 0 <= index < count:
            continue
        seen[index] += 1
        for pid, threads in found.items():
            stats = procs.get(pid)
            sums[index][_group(stats.role) if stats else "system"] += max(0, threads)
    return [
        {f"want_{r}": v / n if n else 0.0 for r, v in row.items()}
        for row, n in zip(sums, seen, strict=True)
    ]


class MachineSampler:
    """(Unix time, machine busy CPU-seconds) every `interval` s in a thread (`with` block)."""

    def __init__(self, interval: float) -> None:
        self.interval, self.samples = interval, [(time.time(), machine_busy_s())]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append((time.time(), machine_busy_s()))

    def __enter__(self) -> MachineSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), machine_busy_s()))


def _spread(out: list[dict[str, float]], group: str, t0: float, t1: float, cpu: float) -> None:
    t0, t1 = max(t0, 0.0), min(t1, float(len(out)))
    if t1 <= t0:
        return
    rate = cpu / (t1 - t0)
    index = int(t0)
    while index < len(out) and index < t1:
        overlap = min(t1, index + 1) - max(t0, index)
        if overlap > 0:
            out[index][group] += rate * overlap
        index += 1


def segments(spans: list[list[Any]], start: float, end: float) -> list[tuple[str, float, float]]:
    """The phase spans with the time outside them named (`start`, `gap:a>b`, `end`)."""
    ordered = sorted((float(s), float(e), str(n)) for n, s, e in spans)
    out: list[tuple[str, float, float]] = []
    cursor, previous = start, None
    for s, e, name in ordered:
        if s > cursor:
            label = "start" if previous is None else f"gap:{previous}>{name}"
            out.append((label, cursor, s))
        out.append((name, s, e))
        cursor, previous = max(cursor, e), name
    if end > cursor:
        out.append(("end", cursor, end))
    return out


def split_tail(
    segs: list[tuple[str, float, float]], binned: list[dict[str, float]], start: float, cores: int
) -> list[tuple[str, float, float]]:
    """`stream` cut at the end of its last bin with `cores` worker processes active."""
    out = []
    for name, s, e in segs:
        if name != "stream":
            out.append((name, s, e))
            continue
        busy = [i for i in range(int(s - start), min(len(binned), math.ceil(e - start)))]
        full = [i for i in busy if binned[i]["active_workers"] >= cores]
        cut = start + full[-1] + 1 if full else s
        cut = min(max(cut, s), e)
        out += [("stream", s, cut), ("stream-tail", cut, e)]
    return out


def by_phase(
    segs: list[tuple[str, float, float]], binned: list[dict[str, float]], start: float, cores: int
) -> dict[str, dict[str, float]]:
    """Per phase name (summed when it recurs): wall, CPU by role, idle core-seconds."""
    phases: dict[str, dict[str, float]] = {}
    for name, s, e in segs:
        entry = phases.setdefault(
            name,
            {
                "wall_s": 0.0,
                **{f"{r}_cpu_s": 0.0 for r in ROLES},
                "others_cpu_s": 0.0,
                "idle_core_s": 0.0,
                "free_core_s": 0.0,
                "unwanted_core_s": 0.0,
            },
        )
        entry["wall_s"] += e - s
        t = s
        while t < e - 1e-9:
            index = int(t - start)
            if index >= len(binned):
                break
            upto = min(e, start + index + 1)
            share = (upto - t) / 1.0
            cpu = 0.0
            for role in ROLES:
                entry[f"{role}_cpu_s"] += binned[index][role] * share
                cpu += binned[index][role]
            machine = binned[index].get("machine", cpu)
            entry["others_cpu_s"] += max(0.0, machine - cpu) * share
            entry["idle_core_s"] += max(0.0, cores - cpu) * share
            entry["free_core_s"] += max(0.0, cores - max(cpu, machine)) * share
            want = sum(binned[index].get(f"want_{r}", 0.0) for r in ROLES)
            entry["unwanted_core_s"] += max(0.0, cores - want) * share
            t = upto
    return {n: {k: round(v, 2) for k, v in e.items()} for n, e in phases.items()}


def child(inputs: str, out: str, workers: int, interval: float) -> dict[str, Any]:
    import yaml

    from benchmarks.proctree import TreeSampler
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
    start = time.time()
    with (
        MachineSampler(interval) as machine,
        DemandSampler(interval) as demand,
        TreeSampler(interval=interval, memory=False, series=True) as sampler,
    ):
        result = run_pipeline(config, progress=False)
    end = time.time()
    section = result.manifest["throughput"]
    binned = bins(sampler.procs, start, end)
    for entry, busy in zip(binned, machine_bins(machine.samples, start, len(binned)), strict=True):
        entry["machine"] = busy
    for entry, wants in zip(
        binned, demand_bins(demand, sampler.procs, start, len(binned)), strict=True
    ):
        entry.update(wants)
    segs = split_tail(segments(section["run"]["phase_spans"], start, end), binned, start, workers)
    phases = by_phase(segs, binned, start, workers)
    return {
        "wall_s": round(end - start, 2),
        "ray_start_s": round(section["fixed"]["ray_start_s"], 2),
        "stage_cpu_s": round(section["cpu_s_total"], 2),
        "phases": phases,
        "idle_core_s": round(sum(p["idle_core_s"] for p in phases.values()), 2),
        "free_core_s": round(sum(p["free_core_s"] for p in phases.values()), 2),
        "others_cpu_s": round(sum(p["others_cpu_s"] for p in phases.values()), 2),
        "unwanted_core_s": round(sum(p["unwanted_core_s"] for p in phases.values()), 2),
        "segments": [(n, round(s - start, 2), round(e - start, 2)) for n, s, e in segs],
        "timeline": [{k: round(v, 2) for k, v in b.items()} for b in binned],
        "digest": _digest(Path(out)),
    }


def _digest(out: Path) -> str:
    import hashlib

    hasher = hashlib.sha256()
    for path in sorted([*out.glob("data/*"), *out.glob("rejects/*"), out / "ledger.json"]):
        hasher.update(path.name.encode() + b"\0" + path.read_bytes())
    return hasher.hexdigest()


def checkout(rev: str, target: Path) -> Path:
    """The tree of `rev` (git archive) with this script copied in."""
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    (target / "benchmarks" / Path(__file__).name).write_bytes(Path(__file__).read_bytes())
    return target


def run_once(variant: str, tree: Path, argv: list[str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["OMP_NUM_THREADS"] = "1"
    load = os.getloadavg()[0]
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_scaling_timeline", "--child", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=tree,  # `-m`: the tree's packages come first on sys.path
    )
    if run.returncode != 0:
        raise RuntimeError(f"{variant} failed: {run.stderr[-3000:]}")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    result.update(variant=variant, load_1m=[round(load, 1), round(os.getloadavg()[0], 1)])
    return result


def table(runs: list[dict[str, Any]]) -> str:
    """Per phase, one column per run: unwanted core-s, idle core-s (ours), wall."""
    names: list[str] = []
    for run in runs:
        names += [n for n in run["phases"] if n not in names]
    width = 26
    lines = [
        "phase".ljust(24) + "".join(f"{r['variant']:>{width}}" for r in runs),
        " " * 24 + "".join(f"{'unwanted / idle / wall s':>{width}}" for _ in runs),
    ]
    rows = [(n, [r["phases"].get(n) for r in runs]) for n in names]
    rows.append(("total", [{**r, "wall_s": r["wall_s"]} for r in runs]))
    for name, cells in rows:
        text = [
            f"{c['unwanted_core_s']:6.2f} / {c['idle_core_s']:6.2f} / {c['wall_s']:6.2f}"
            if c
            else ""
            for c in cells
        ]
        lines.append(name.ljust(24) + "".join(f"{t:>{width}}" for t in text))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    add_corpus_argument(parser)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--before", default=BEFORE, help="the commit `before` runs")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv if argv is not None else [])
    if args.child:
        inputs, out, workers, interval = args.child
        result = child(inputs, out, int(workers), float(interval))
        print(json.dumps(result))
        return result
    from benchmarks.bench_pipeline_scaling import build_pages

    source = corpus_dir(args.corpus) / "web.warc.gz"
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_timeline_") as tmp:
        inputs = Path(tmp) / "warc"
        built = build_pages(source, inputs, args.pages, args.files)
        trees = {"after": REPO}
        if "before" in args.variants:
            trees["before"] = checkout(args.before, Path(tmp) / "before")
        for number in range(args.repeat):
            for variant in args.variants:
                out = Path(tmp) / f"{variant}{number}"
                child_argv = [str(inputs), str(out), str(args.workers), str(args.interval)]
                runs.append(run_once(variant, trees[variant], child_argv))
                print(table(runs[-1:]), flush=True)
    result = {
        "input": {**built, "source": str(source)},
        "before": args.before,
        "workers": args.workers,
        "machine": {"cpus": os.cpu_count(), "shared": True},
        "runs": runs,
        "outputs_identical": len({r["digest"] for r in runs}) == 1,
    }
    print(table(runs))
    print(f"outputs identical: {result['outputs_identical']}")
    write_result("bench_scaling_timeline", result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
