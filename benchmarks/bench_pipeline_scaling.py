"""Steady-state throughput and 1 -> 2 worker scaling of the data job, start-up apart (issue 13.4).

Input: >= 5,000 real WARC pages built from CORPUS/web.warc.gz (`--corpus DIR`, the 967 HTML
responses of the development corpus): the responses are REPEATED (copy c of page i gets the URI
`<uri>#copy<c>` and a fresh WARC-Record-ID; payload bytes unchanged) until `--pages` records
exist, dealt round-robin into `--files` WARC.gz files. Repeats are exact duplicates for the dedup
stage (5 of every 6 documents land in an exact cluster): more duplication than a crawl has.

    ours:      `pretrain data run` with the stages of configs/pipeline.yaml (the defaults a user
               gets: extract (resiliparse), langid, rules, safety, dedup), fresh Ray per run
    baseline:  datatrove WarcReader -> Trafilatura -> Gopher/C4/FineWeb quality filters ->
               PIIFormatter -> ParquetWriter, LocalPipelineExecutor (no langid: its filter
               downloads a model; no dedup: datatrove's MinHash is a separate 4-step job, see
               RESULTS_LOG.md, bench_dedup), same files, same worker counts
    plain:     the no-Ray ceiling: the same stream code (reads, map stages, dedup's map side,
               pieces) in 1 vs 2 plain processes (benchmarks.plain_stream), start-up apart

Each run is its own process. Reported per run: wall, Ray start-up (ray.init, driver) apart from
the work after it, the CPU-seconds our workers measured per stage (manifest `throughput`), and the
CPU-seconds of the whole process tree (rusage of the child and every descendant it reaped: all of
datatrove's processes, but NOT Ray's workers, which the child never reaps: 43 s against 78 s
measured inside them at 5,000 pages; so ours is compared by its in-worker CPU-seconds). Steady-state MB/s per core = raw WARC
payload MB / CPU-seconds of the stages; scaling efficiency = work(1) / work(2) / 2 with start-up
excluded. The machine is shared (2 cores, 8 engineers): wall numbers are noisy, the CPU-time
ratios much less so; and Ray runs its workers at nice 15, so on a machine busy with other
users' nice-0 processes they get a small share of it whatever their count: wall time there
measures the machine. So each run also samples every process of its tree (benchmarks.proctree)
and splits the CPU by phase (manifest `throughput.run.phase_spans`: stream, dedup-map / -verify
/ -aggregate / -join, merge; benchmarks.phasecpu): worker vs system (driver, raylet, GCS,
agents) CPU, the busiest process, and `cpu_bound_s`, the least wall each phase could take on
the machine's cores from its CPU alone. `ours_cpu_bound_scaling_efficiency` is the scaling
those allow (no latency counted; but Ray's system processes and Ray Data's own actors poll, so
their CPU grows with the wall a loaded machine stretches: it inflates total CPU more at the
slower run). `ours_busiest_process_scaling_efficiency` compares only the busiest process of
each phase: how evenly the work is split. The wall efficiency needs a quiet machine.

    .venv/bin/python -m benchmarks.bench_pipeline_scaling --corpus DIR [--pages 10000]
        [--runs ours datatrove]   (one side per invocation keeps each under ~5 minutes)
        [--workers 2]             (one point, no scaling rows: the smoke run of `make bench`'s
                                   test, which only shows each side starts and reports)
        [--warm off]              (A/B: no Ray Data warm-up after a local start, so Ray Data's
                                   per-driver actors start in the job's first seconds instead;
                                   result file `..._warm_off`)

The start-up row (`rows.startup`): Ray's start (`ray_init_s`: ray.init and the watchdog) and
Ray Data's warm-up (`ray_data_warm_s`) apart, and their share of each run; `rows.target_met`
says whether efficiency >= 0.85 with start-up under 10% of both runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import add_corpus_argument, corpus_dir, write_result
from benchmarks.phasecpu import phase_cpu, phase_roles
from benchmarks.plain_stream import plain_rows, run_plain
from benchmarks.proctree import TreeSampler

REPO = Path(__file__).resolve().parents[1]
PAGES = 10_000
"""The issue asks for at least 5,000 pages; at 5,000 the 2-worker run's start-up (Ray's start
and Ray Data's warm-up, ~8-10 s quiet) was 13-14% of a ~60-s run, over the 10% the scaling
target is stated for. 10,000 pages doubles the work, not the start-up (~5 min quiet for both
runs)."""


def build_pages(source: Path, target: Path, pages: int, files: int) -> dict[str, int]:
    """Write `files` WARC.gz files holding `pages` HTTP responses repeated from `source`."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.warcwriter import WARCWriter

    with open(source, "rb") as handle:
        raw = []
        for record in ArchiveIterator(handle):
            if record.rec_type == "response":
                buffer = io.BytesIO()
                WARCWriter(buffer, gzip=False).write_record(record)
                raw.append(buffer.getvalue())
    target.mkdir(parents=True, exist_ok=True)
    writers = [io.BytesIO() for _ in range(files)]
    for index in range(pages):
        copy, page = divmod(index, len(raw))
        for record in ArchiveIterator(io.BytesIO(raw[page])):
            headers = record.rec_headers
            uri = headers.get_header("WARC-Target-URI")
            headers.replace_header("WARC-Target-URI", f"{uri}#copy{copy}")
            headers.replace_header("WARC-Record-ID", f"<urn:uuid:{uuid.UUID(int=index)}>")
            WARCWriter(writers[index % files], gzip=True).write_record(record)
    for number, buffer in enumerate(writers):
        (target / f"pages{number:02d}.warc.gz").write_bytes(buffer.getvalue())
    return {"pages": pages, "distinct_pages": len(raw), "files": files}


WARM = "BENCH_WARM"
"""Environment of a child run: "off" skips `rayinit.warm_ray_data` (the A/B of the warm-up)."""


def _time_warm_up(spent: list[float]) -> None:
    """Time (or, with BENCH_WARM=off, skip) the Ray Data warm-up the runner calls after a local
    start, so the start-up row splits into Ray's own start and the warm-up."""
    from pretrain import rayinit

    warm = rayinit.warm_ray_data
    skip = os.environ.get(WARM) == "off"

    def timed() -> None:
        begin = time.perf_counter()
        if not skip:
            warm()
        spent.append(time.perf_counter() - begin)

    rayinit.warm_ray_data = timed  # type: ignore[assignment]


def child_ours(inputs: str, out: str, workers: int) -> dict[str, Any]:
    import yaml

    from data_pipeline.config import PipelineConfig
    from data_pipeline.runner import run_pipeline

    warm_s: list[float] = []
    _time_warm_up(warm_s)
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
    with TreeSampler(interval=0.5, memory=False, series=True) as sampler:
        result = run_pipeline(config, progress=False)
    wall = time.perf_counter() - start
    section = result.manifest["throughput"]
    roles = sampler.by_role()
    return {
        "wall_s": wall,
        "ray_start_s": section["fixed"]["ray_start_s"],
        "ray_data_warm_s": round(sum(warm_s), 3),
        "ray_init_s": round(section["fixed"]["ray_start_s"] - sum(warm_s), 3),
        "warm": os.environ.get(WARM, "on"),
        "work_s": wall - section["fixed"]["ray_start_s"],
        "stage_setup_cpu_s": section["fixed"]["stage_setup_cpu_s"],
        "stages": {s["stage"]: s["cpu_s"] for s in section["stages"]},
        "stage_cpu_s": section["cpu_s_total"],
        "phases_s": section["run"]["phases_s"],
        "sampled_cpu_s_by_role": {r: v["cpu_s"] for r, v in roles.items()},
        "other_cpu_s_by_command": roles.get("other", {}).get("commands", {}),
        "phase_cpu": phase_cpu(sampler.procs, section["run"]["phase_spans"], os.cpu_count() or 1),
        "phase_cpu_by_role": phase_roles(sampler.procs, section["run"]["phase_spans"]),
        "raw_bytes": result.ledger["bytes_in"],
        "docs_in": result.ledger["documents_in"],
        "docs_kept": result.ledger["documents_kept"],
    }


def child_datatrove(inputs: str, out: str, workers: int) -> dict[str, Any]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.pipeline.formatters import PIIFormatter
    from datatrove.pipeline.readers import WarcReader
    from datatrove.pipeline.writers import ParquetWriter

    pipeline = [
        WarcReader(inputs, glob_pattern="*.warc.gz"),
        Trafilatura(favour_precision=True, timeout=5.0),
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(),
        FineWebQualityFilter(),
        PIIFormatter(),
        ParquetWriter(f"{out}/shards"),
    ]
    files = len(list(Path(inputs).glob("*.warc.gz")))
    start = time.perf_counter()
    LocalPipelineExecutor(pipeline, tasks=files, workers=workers, logging_dir=f"{out}/logs").run()
    return {"wall_s": time.perf_counter() - start, "ray_start_s": 0.0}


def _child(kind: str, inputs: Path, out: Path, workers: int) -> dict[str, Any]:
    """One run in a fresh interpreter; adds the CPU-seconds of its whole reaped process tree."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "benchmarks.bench_pipeline_scaling", "--child", kind]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    run = subprocess.run(
        [*cmd, str(inputs), str(out), str(workers)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=REPO,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise RuntimeError(f"{kind} failed: {run.stderr[-3000:]}")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    result["load_1m"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    result["tree_cpu_s"] = round(
        (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2
    )
    print(f"{kind} workers={workers}: {json.dumps(result)}", flush=True)
    return result


def _scaling(runs: dict[int, dict[str, Any]], key: str) -> float:
    return round(runs[1][key] / runs[2][key] / 2, 3)


def raw_bytes(inputs: Path) -> int:
    """HTTP payload bytes of the response records (what our ledger counts as bytes in)."""
    from warcio.archiveiterator import ArchiveIterator

    total = 0
    for path in sorted(inputs.glob("*.warc.gz")):
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                if record.rec_type == "response":
                    total += len(record.content_stream().read())
    return total


TARGET = 0.85
STARTUP_SHARE_MAX = 0.10
"""Issue 13.4: efficiency >= TARGET once start-up is under this share of the run."""


def startup_row(ours: dict[int, Any]) -> dict[int, dict[str, Any]]:
    """The start-up cost as its own row: Ray's start (ray.init, the watchdog) and Ray Data's
    warm-up apart, and their share of the run."""
    return {
        w: {
            "ray_start_s": round(r["ray_start_s"], 2),
            "ray_init_s": round(r.get("ray_init_s", r["ray_start_s"]), 2),
            "ray_data_warm_s": round(r.get("ray_data_warm_s", 0.0), 2),
            "startup_share": round(r["ray_start_s"] / r["wall_s"], 3),
        }
        for w, r in ours.items()
    }


def summarise(
    ours: dict[int, Any], theirs: dict[int, Any], mb: float, plain: dict[int, Any] | None = None
) -> dict[str, Any]:
    """The rows of BENCHMARKS.md from the runs made (ours, datatrove and/or the no-Ray plain
    processes, 1 and 2 workers)."""
    rows: dict[str, Any] = plain_rows(plain, mb) if plain and set(plain) == {1, 2} else {}
    if theirs:
        if set(theirs) == {1, 2}:
            rows["datatrove_scaling_efficiency"] = _scaling(theirs, "wall_s")
        rows["datatrove_tree_mb_per_cpu_s"] = {
            w: round(mb / r["tree_cpu_s"], 3) for w, r in theirs.items()
        }
    if not ours:
        return rows
    for workers, run in ours.items():
        rows[f"ours_{workers}w"] = {
            "steady_mb_per_s_per_core": round(mb / run["stage_cpu_s"], 3),
            "wall_mb_per_s": round(mb / run["work_s"], 3),
            "startup_share": round(run["ray_start_s"] / run["wall_s"], 3),
        }
    rows["startup"] = startup_row(ours)
    if set(ours) != {1, 2}:  # one point (a smoke run: --workers 2): nothing to scale
        return rows
    rows["ours_scaling_efficiency_startup_excluded"] = _scaling(ours, "work_s")
    rows["ours_scaling_efficiency_wall"] = _scaling(ours, "wall_s")
    rows["ours_cpu_ratio_2w_over_1w"] = round(ours[2]["stage_cpu_s"] / ours[1]["stage_cpu_s"], 3)
    rows["ours_tree_cpu_ratio_2w_over_1w"] = round(ours[2]["tree_cpu_s"] / ours[1]["tree_cpu_s"], 3)
    rows["ray_start_s"] = {w: round(r["ray_start_s"], 2) for w, r in ours.items()}
    rows["target_met"] = bool(
        rows["ours_scaling_efficiency_startup_excluded"] >= TARGET
        and all(r["startup_share"] < STARTUP_SHARE_MAX for r in rows["startup"].values())
    )
    bound = {w: sum(p["cpu_bound_s"] for p in r["phase_cpu"].values()) for w, r in ours.items()}
    rows["ours_cpu_bound_s"] = {w: round(b, 2) for w, b in bound.items()}
    rows["ours_cpu_bound_scaling_efficiency"] = round(bound[1] / bound[2] / 2, 3)
    busiest = {
        w: sum(p["max_process_cpu_s"] for p in r["phase_cpu"].values()) for w, r in ours.items()
    }
    # how evenly the work is split: the busiest process of each phase, 1 vs 2 workers
    rows["ours_busiest_process_scaling_efficiency"] = round(busiest[1] / busiest[2] / 2, 3)
    rows["ours_phase_wall_s"] = {w: r["phases_s"] for w, r in ours.items()}
    rows["ours_system_cpu_s"] = {
        w: round(sum(p["system_cpu_s"] for p in r["phase_cpu"].values()), 2)
        for w, r in ours.items()
    }
    # Ray's own processes (driver, agents, raylet, GCS, Ray Data's actors) against the workers
    rows["ours_cpu_s_by_role"] = {w: r["sampled_cpu_s_by_role"] for w, r in ours.items()}
    rows["ours_stream_cpu_s_by_role"] = {
        w: r["phase_cpu_by_role"].get("stream", {}) for w, r in ours.items()
    }
    rows["ours_tree_mb_per_cpu_s"] = {w: round(mb / r["tree_cpu_s"], 3) for w, r in ours.items()}
    stream = {w: r["phases_s"].get("stream") for w, r in ours.items()}
    if all(stream.values()):  # the phase the plain baseline runs: Ray's loss is the gap
        rows["ours_stream_scaling_efficiency"] = round(stream[1] / stream[2] / 2, 3)
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    add_corpus_argument(parser)
    parser.add_argument("--pages", type=int, default=PAGES)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument(
        "--runs",
        nargs="+",
        choices=("ours", "datatrove", "plain"),
        default=["ours", "datatrove"],
        help="which side(s) to run (each writes its own result file)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        choices=(1, 2),
        default=[1, 2],
        help="the worker counts run (one: a smoke run that only shows each side starts)",
    )
    parser.add_argument("--warm", choices=("on", "off"), default="on")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv if argv is not None else [])
    if args.child:
        kind, inputs, out, workers = args.child
        run = {"ours": child_ours, "datatrove": child_datatrove, "plain": run_plain}[kind]
        result = run(inputs, out, int(workers))
        print(json.dumps(result))
        return result
    os.environ[WARM] = args.warm
    source = corpus_dir(args.corpus) / "web.warc.gz"
    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
        inputs = Path(tmp) / "warc"
        built = build_pages(source, inputs, args.pages, args.files)
        runs = {
            kind: {w: _child(kind, inputs, Path(tmp) / f"{kind}{w}", w) for w in args.workers}
            for kind in args.runs
        }
        mb = raw_bytes(inputs) / 1e6
    ours, theirs = runs.get("ours", {}), runs.get("datatrove", {})
    result = {
        "input": {**built, "source": str(source), "raw_mb": round(mb, 2)},
        "machine": {"cpus": os.cpu_count(), "shared": True, "load_1m": os.getloadavg()[0]},
        "ours": ours,
        "datatrove": theirs,
        "plain": runs.get("plain", {}),
        "rows": summarise(ours, theirs, mb, runs.get("plain")),
        "target_scaling_efficiency": TARGET,
    }
    print(json.dumps(result["rows"], indent=1))
    suffix = "_warm_off" if args.warm == "off" else ""
    suffix += "" if sorted(args.workers) == [1, 2] else "_" + "_".join(map(str, args.workers)) + "w"
    write_result("bench_pipeline_scaling_" + "_".join(args.runs) + suffix, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
