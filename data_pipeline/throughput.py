"""What each stage of a data run cost, measured inside the workers, kept per output part.

Workers time their own work with `time.process_time()` (CPU-seconds of that process, so a busy
machine does not inflate it the way wall time would; a stage's CPU includes what its document
workers spent: data_pipeline.timelimit.cpu_time) and write one small record per batch and
shard: `OUT/.parts/cost/<shard>/<tag>-<first row>-<last row>.json` (named by its rows, so a
retried batch overwrites its own record instead of counting twice). A batch holding rows of
several shards splits its CPU-seconds by their row counts; documents and raw bytes are exact.
The shard's merge task folds its records, plus the cost of writing it, into
`OUT/.parts/part-costs/<shard>.json`: a resumed run reuses a finished part with its cost, so the
manifest's totals cover every part whichever run computed it. A global stage's map output records
its cost per part with its persisted map output (data_pipeline.global_parts), its join per part
like a map stage, and its aggregate (`GlobalStage.cost`) once for the whole corpus
(`<stage>.global-cost.json`).

Stage set-up (model loading in each worker) and Ray start-up are reported apart, for this run:
they are fixed costs, not per-byte ones (`data_pipeline.estimate` scales only the per-byte ones).

The manifest's `throughput` section (`report`) and the summary line (`summary`):

stages:  per stage (read, each map stage, each global stage, write), over EVERY part of the
         output whichever run computed it: cpu_s, docs, bytes (raw input bytes of the
         documents it processed), docs_per_cpu_s, mb_per_cpu_s (= per core), peak_rss_mb
fixed:   this run's start-up, apart: ray_start_s (driver wall), stage set-up in workers
run:     this run: cpus, ray_work_s (wall after start-up), the documents it computed and
         their rate per wall second (steady state: start-up excluded), and phases_s: the
         driver's wall-seconds per phase (stream, <global>-map/-verify/-aggregate/-join, merge) and
         phase_spans ([phase, start, end] in Unix seconds)
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
    write_atomic,
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


def global_cost_path(out: OutPath, stage: str) -> OutPath:
    return out / parts.PARTS / f"{stage}.global-cost.json"


def add_cost(into: dict[str, Any], cost: dict[str, Any]) -> None:
    """Add one part's (or stage's) cost to the totals `into`: sums, and the largest peak RSS."""
    into["cpu_s"] = into.get("cpu_s", 0.0) + cost.get("cpu_s", 0.0)
    into["docs"] = into.get("docs", 0) + cost.get("docs", 0)
    into["bytes"] = into.get("bytes", 0) + cost.get("bytes", 0)
    into["peak_rss_mb"] = max(into.get("peak_rss_mb", 0.0), cost.get("peak_rss_mb", 0.0))


def record_batch(out: str | OutPath, tag: str, batch: pa.Table, cpu_s: dict[str, float]) -> None:
    """Write the CPU-seconds `cpu_s` (stage -> seconds) spent on `batch`, split by shard."""
    if not batch.num_rows or "_shard" not in batch.column_names:
        return
    shard_column = batch.column("_shard")
    for shard in sorted(set(shard_column.to_pylist())):
        rows = batch.filter(pc.equal(shard_column, shard))
        share = rows.num_rows / batch.num_rows
        record = {stage: table_cost(rows, seconds * share) for stage, seconds in cpu_s.items()}
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


def seal_part(out: OutPath, shard: str, write_cpu_s: float) -> bytes:
    """Fold the batch records of `shard` and the cost of writing it (every document the read
    stage produced for it) into its part cost file; returns the bytes written. A stage this run
    did not record for the part keeps its earlier entry: after a resume with a global stage, the
    map stages before it are not run again (their output is reused with the global stage's
    persisted map output)."""
    totals: dict[str, dict[str, Any]] = {}
    folder = cost_dir(out) / shard
    for path in listed(folder, "*.json") if folder.is_dir() else ():
        for stage, cost in json.loads(path.read_text(encoding="utf-8")).items():
            add_cost(totals.setdefault(stage, {}), cost)
    totals = {**(_load(parts.part_cost_path(out, shard)) or {}), **totals}
    read = totals.get(READ, {})
    totals[WRITE] = {
        "cpu_s": write_cpu_s,
        "docs": read.get("docs", 0),
        "bytes": read.get("bytes", 0),
        "peak_rss_mb": peak_rss_mb(),
    }
    parts.part_cost_path(out, shard).parent.mkdir(parents=True, exist_ok=True)
    data = json_bytes(totals)
    write_atomic(parts.part_cost_path(out, shard), data)
    remove_tree(folder)
    return data


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


def save_global_costs(out: OutPath, stages: list[Any], documents: int, raw_bytes: int) -> None:
    """Record each global stage's measured aggregate cost of this run (its map and join sides are
    recorded per part: with the persisted map output, and in the part's cost file)."""
    for stage in stages:
        cost = getattr(stage, "cost", None)  # GlobalStage.cost (no import: stages import us)
        if cost:
            record = {**cost, "docs": documents, "bytes": raw_bytes}
            write_json(global_cost_path(out, stage.name), record)


# --- the manifest's throughput section and the summary line ------------------------------------
MB = 1e6


def _load(path: OutPath) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


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
    records = [r for p in listed(cost_dir(out) / SETUP, "*.json") if (r := _load(p)) is not None]
    return {
        "stage_setup_cpu_s": round(sum(r["cpu_s"] for r in records), 4),
        "stage_setup_wall_s_max": round(max((r["wall_s"] for r in records), default=0.0), 4),
        "workers_set_up": len(records),
    }


def _global_cost(
    out: OutPath,
    name: str,
    shards: list[str],
    joins: dict[str, Any],
    verified: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A global stage's cost: its map of each part (recorded with the persisted map output, so
    a map reused by a resumed run keeps its cost), its joins (per part) and the aggregate. The
    map costs are `verified` when this run's driver folded them as it verified every part's
    record (ledger.Merged.map_costs); else every record is read."""
    combined: dict[str, Any] = dict(verified or {})
    if verified is None:
        paths = (parts.record_path(out, name, shard) for shard in shards)  # read ahead in a store
        for record in parts.ordered(_load, paths, parts.in_flight_for(out)):
            cost = (record or {}).get("cost")
            if cost:
                add_cost(combined, cost)
    aggregate = _load(global_cost_path(out, name)) or {}
    if not combined:
        return {}  # the map output was not measured: the stage is listed as unmeasured
    for extra in (joins, aggregate):
        combined["cpu_s"] += extra.get("cpu_s", 0.0)
        combined["peak_rss_mb"] = max(combined["peak_rss_mb"], extra.get("peak_rss_mb", 0.0))
    return combined


def report(
    out: OutPath,
    shards: list[str],
    stage_names: list[str],
    global_names: list[str],
    reused: set[str],
    clock: RunClock | None,
    merged: Merged,
) -> dict[str, Any]:
    """The `throughput` section of the manifest (see the module docstring). The cost records the
    merge of this run handed over are folded in `merged` already (ledger.Merged: parts
    it merged, none reused); the others are read, their digests noted in `merged` for the
    manifest."""
    this_run: dict[str, Any] = dict(merged.costs.get(READ, {}))
    todo = [shard for shard in shards if shard not in merged.costed]
    paths = (parts.part_cost_path(out, shard) for shard in todo)
    for shard, data in zip(todo, parts.read_bytes(out, paths), strict=True):
        if data is not None:
            merged.add_cost(shard, data)  # its digest for the manifest: not read again to hash it
            if shard not in reused:
                add_cost(this_run, json.loads(data).get(READ, {}))
    totals = {stage: dict(cost) for stage, cost in merged.costs.items()}
    measured = len(merged.costed)
    for name in global_names:
        verified = merged.map_costs.get(name)
        combined = _global_cost(out, name, shards, totals.get(name, {}), verified)
        if combined:
            totals[name] = combined
    order = [READ, *stage_names, WRITE]
    stages = [_rates(name, totals[name]) for name in order if name in totals]
    section: dict[str, Any] = {
        "stages": stages,
        "cpu_s_total": round(sum(s["cpu_s"] for s in stages), 4),
        "parts": len(shards),
        "parts_measured": measured,
        "unmeasured_stages": [n for n in stage_names if n not in totals],
    }
    if clock is not None:
        docs, raw = this_run.get("docs", 0), this_run.get("bytes", 0)
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
