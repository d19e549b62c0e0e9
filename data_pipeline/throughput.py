"""What each stage of a data run cost, measured inside the workers (`time.process_time()`: a busy
machine does not inflate it), for the manifest's `throughput` section and the summary line.

Workers write one record per batch and part (`OUT/.parts/cost/<part>/<tag>-<first>-<last>.json`,
named by its rows, so a retried batch replaces its record); each part's merge folds its records
and hands them to the driver (ledger.Merged). The section covers the parts this run computed:
per stage cpu_s, docs, bytes, docs_per_cpu_s, mb_per_cpu_s, peak_rss_mb; `fixed` (Ray start-up,
stage set-up, apart) and `run` (cpus, wall, and each phase's wall and span in the driver).
"""

from __future__ import annotations

import json
import os
import resource
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from data_pipeline import parts
from pretrain.storage import (
    OutPath,
    json_bytes,
    listed,
    output_path,
    remove_tree,
    write_json,
)

if TYPE_CHECKING:
    from data_pipeline.ledger import Merged  # which folds costs with this module's add_cost

COSTS = "cost"
SETUP = "setup"
READ = "read"
WRITE = "write"
"""Pseudo-stages: decoding the input records, and select + writing the shards and rejects."""


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def cost_dir(out: OutPath) -> OutPath:
    return out / parts.PARTS / COSTS


def add_cost(into: dict[str, Any], cost: dict[str, Any]) -> None:
    """Add one part's (or stage's) cost to the totals `into`: sums, and the largest peak RSS."""
    into["cpu_s"] = into.get("cpu_s", 0.0) + cost.get("cpu_s", 0.0)
    into["docs"] = into.get("docs", 0) + cost.get("docs", 0)
    into["bytes"] = into.get("bytes", 0) + cost.get("bytes", 0)
    into["peak_rss_mb"] = max(into.get("peak_rss_mb", 0.0), cost.get("peak_rss_mb", 0.0))


def record_batch(
    out: str | OutPath, tag: str, batch: pa.Table, cpu_s: dict[str, float], docs: bool = True
) -> None:
    """Write the CPU-seconds `cpu_s` (stage -> seconds) spent on `batch`, split by part (its rows'
    documents and raw bytes counted unless not `docs`: a global stage's are counted by its join)."""
    if not batch.num_rows or "_shard" not in batch.column_names:
        return
    shard_column = batch.column("_shard")
    for shard in sorted(set(shard_column.to_pylist())):
        rows = batch.filter(pc.equal(shard_column, shard))
        share = rows.num_rows / batch.num_rows
        record = {stage: table_cost(rows, seconds * share) for stage, seconds in cpu_s.items()}
        if not docs:
            record = {stage: {**cost, "docs": 0, "bytes": 0} for stage, cost in record.items()}
        first, last = pc.min(rows.column("_row")).as_py(), pc.max(rows.column("_row")).as_py()
        target = cost_dir(output_path(out)) / shard
        target.mkdir(parents=True, exist_ok=True)
        write_json(target / f"{tag}-{first:012d}-{last:012d}.json", record)


def table_cost(rows: pa.Table, cpu_s: float) -> dict[str, Any]:
    """A cost record for `cpu_s` spent on every row of `rows` (one part)."""
    raw = int(pc.sum(rows.column("_raw_bytes")).as_py() or 0) if rows.num_rows else 0
    return {"cpu_s": cpu_s, "docs": rows.num_rows, "bytes": raw, "peak_rss_mb": peak_rss_mb()}


def timed_read(out: str | OutPath, batches: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """Yield `batches`, recording the CPU-seconds spent producing each one as `read`."""
    while True:
        start = time.process_time()
        try:
            batch = next(batches)
        except StopIteration:
            return
        record_batch(out, READ, batch, {READ: time.process_time() - start})
        yield batch


def record_setup(out: str | OutPath, stages: list[Any]) -> None:
    """Set up the stages (load models), recording this worker's CPU- and wall-seconds for it."""
    cpu, wall = time.process_time(), time.perf_counter()
    for stage in stages:
        stage.setup()
    target = cost_dir(output_path(out)) / SETUP
    target.mkdir(parents=True, exist_ok=True)
    name = f"{socket.gethostname()}-{os.getpid()}-{id(stages)}.json"
    record = {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}
    write_json(target / name, record)


def fold_part(out: OutPath, shard: str, write: dict[str, Any]) -> bytes:
    """The batch records of `shard` folded per stage, with the cost of writing it (`WRITE`), as
    JSON bytes; its records are deleted."""
    totals: dict[str, dict[str, Any]] = {}
    folder = cost_dir(out) / shard
    for path in listed(folder, "*.json") if folder.is_dir() else ():
        for stage, cost in json.loads(path.read_text(encoding="utf-8")).items():
            add_cost(totals.setdefault(stage, {}), cost)
    totals[WRITE] = {**write, "peak_rss_mb": peak_rss_mb()}
    remove_tree(folder)
    return json_bytes(totals)


def timed_task(func: Callable[..., Any], num_returns: int) -> Callable[..., Any]:
    """Wrap a Ray task function so it also returns its own CPU-seconds and peak RSS (one more
    return value, last)."""

    def timed(*args: Any) -> Any:
        start = time.process_time()
        result = func(*args)
        cost = {"cpu_s": time.process_time() - start, "peak_rss_mb": peak_rss_mb()}
        return (result, cost) if num_returns == 1 else (*result, cost)

    timed.__name__ = getattr(func, "__name__", "task")
    timed.__qualname__ = timed.__name__
    return timed


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """What tasks reported (the costs `timed_task` returned, a dedup step's counts), merged:
    numbers summed, the largest peak RSS."""
    merged: dict[str, Any] = {}
    for report in reports:
        for key, value in report.items():
            if key == "peak_rss_mb":
                merged[key] = max(merged.get(key, 0.0), value)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                merged[key] = merged.get(key, 0) + value
    return merged


@dataclass
class RunClock:
    """Driver wall-clock of this run: Ray start-up apart from the work it then ran."""

    ray_start_s: float = 0.0
    """connect / start a local Ray (ray.init)."""
    ray_work_s: float = 0.0
    """building and executing the datasets (stages, global stages, merge), after start-up."""
    cpus: int = 0
    """CPUs of the Ray cluster the run used."""
    phases: dict[str, float] = field(default_factory=dict)
    """Driver wall-seconds of each phase of the work (stream, <stage>-map, -verify, -aggregate,
    -join, merge): where a run waits, which the CPU-seconds per stage do not show."""

    spans: list[tuple[str, float, float]] = field(default_factory=list)
    """(phase, start, end) in Unix seconds: to line the phases up with other measurements
    (benchmarks/bench_pipeline_scaling.py attributes each process's CPU to them)."""
    marker: OutPath | None = None
    """Where the phase now running is written when it starts (`OUT/.parts/progress/phase.json`:
    `{"phase": ..., "done": [...]}`), for a user or a test watching a run from outside."""

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        begin, at = time.perf_counter(), time.time()
        if self.marker is not None:
            done = [span[0] for span in self.spans]
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.marker, {"phase": name, "started": at, "done": done})
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - begin
            self.spans.append((name, at, time.time()))


# --- the manifest's throughput section and the summary line ------------------------------------
MB = 1e6


def _rates(name: str, cost: dict[str, Any]) -> dict[str, Any]:
    cpu = cost.get("cpu_s", 0.0)
    return {
        "stage": name,
        "cpu_s": round(cpu, 4),
        "docs": cost.get("docs", 0),
        "bytes": cost.get("bytes", 0),
        "docs_per_cpu_s": round(cost.get("docs", 0) / cpu, 2) if cpu > 0 else None,
        "mb_per_cpu_s": round(cost.get("bytes", 0) / MB / cpu, 4) if cpu > 0 else None,
        "peak_rss_mb": round(cost.get("peak_rss_mb", 0.0), 1),
    }


def _setup(out: OutPath) -> dict[str, Any]:
    records = [json.loads(p.read_bytes()) for p in listed(cost_dir(out) / SETUP, "*.json")]
    return {
        "stage_setup_cpu_s": round(sum(r["cpu_s"] for r in records), 4),
        "stage_setup_wall_s_max": round(max((r["wall_s"] for r in records), default=0.0), 4),
        "workers_set_up": len(records),
    }


def report(
    out: OutPath, stages: list[Any], clock: RunClock | None, merged: Merged
) -> dict[str, Any]:
    """The `throughput` section of the manifest (see the module docstring): the costs the merge
    of this run handed over (`merged`), each global stage's with its aggregate (`GlobalStage.cost`,
    measured once for the whole corpus)."""
    totals = {stage: dict(cost) for stage, cost in merged.costs.items()}
    for stage in stages:
        aggregate = getattr(stage, "cost", None)  # no import of the stages: they import us
        if aggregate and stage.name in totals:
            total = totals[stage.name]
            total["cpu_s"] += aggregate.get("cpu_s", 0.0)
            total["peak_rss_mb"] = max(total["peak_rss_mb"], aggregate.get("peak_rss_mb", 0.0))
    names = [stage.name for stage in stages]
    rates = [_rates(name, totals[name]) for name in [READ, *names, WRITE] if name in totals]
    section: dict[str, Any] = {
        "stages": rates,
        "cpu_s_total": round(sum(s["cpu_s"] for s in rates), 4),
        "parts_measured": merged.measured,
        "unmeasured_stages": [n for n in names if n not in totals] if rates else [],
    }
    if clock is not None:
        docs, raw = totals.get(READ, {}).get("docs", 0), totals.get(READ, {}).get("bytes", 0)
        work = clock.ray_work_s
        section["fixed"] = {"ray_start_s": round(clock.ray_start_s, 4), **_setup(out)}
        section["run"] = {
            "cpus": clock.cpus,
            "ray_work_s": round(work, 4),
            "docs_computed": docs,
            "bytes_computed": raw,
            "docs_per_s": round(docs / work, 2) if work > 0 else None,
            "mb_per_s": round(raw / MB / work, 4) if work > 0 else None,
            "phases_s": {name: round(s, 3) for name, s in clock.phases.items()},
            "phase_spans": [[name, round(a, 3), round(b, 3)] for name, a, b in clock.spans],
        }
    return section


def summary(section: dict[str, Any] | None) -> str:
    """One line: CPU-seconds and docs per CPU-second per stage, start-up apart."""
    if not section or not section.get("stages"):
        return ""
    stages = ", ".join(
        f"{s['stage']} {s['cpu_s']:.2f}s"
        + (f" ({s['docs_per_cpu_s']:.0f} docs/s/core)" if s["docs_per_cpu_s"] else "")
        for s in section["stages"]
    )
    line = f"; CPU-seconds: {stages}"
    fixed = section.get("fixed")
    if fixed:
        line += (
            f"; start-up apart: Ray {fixed['ray_start_s']:.1f}s, "
            f"stage set-up {fixed['stage_setup_cpu_s']:.1f} CPU-s"
        )
    return line
