"""The manifest's `throughput` section and the summary line, from the costs workers recorded.

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
from typing import Any

from data_pipeline import throughput
from data_pipeline.ledger import Merged
from data_pipeline.parts import in_flight_for, ordered, read_bytes
from data_pipeline.throughput import READ, WRITE, RunClock
from pretrain.storage import OutPath, listed

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
    records = [
        r
        for p in listed(throughput.cost_dir(out) / throughput.SETUP, "*.json")
        if (r := _load(p)) is not None
    ]
    return {
        "stage_setup_cpu_s": round(sum(r["cpu_s"] for r in records), 4),
        "stage_setup_wall_s_max": round(max((r["wall_s"] for r in records), default=0.0), 4),
        "workers_set_up": len(records),
    }


def _global_cost(
    out: OutPath,
    name: str,
    parts: list[str],
    joins: dict[str, Any],
    verified: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A global stage's cost: its map of each part (recorded with the persisted map output, so
    a map reused by a resumed run keeps its cost), its joins (per part) and the aggregate. The
    map costs are `verified` when this run's driver folded them as it verified every part's
    record (ledger.Merged.map_costs); else every record is read."""
    from data_pipeline.global_parts import record_path

    combined: dict[str, Any] = dict(verified or {})
    if verified is None:
        paths = (record_path(out, name, shard) for shard in parts)
        for record in ordered(_load, paths, in_flight_for(out)):  # read ahead in an object store
            cost = (record or {}).get("cost")
            if cost:
                throughput.add_cost(combined, cost)
    aggregate = _load(throughput.global_cost_path(out, name)) or {}
    if not combined:
        return {}  # the map output was not measured: the stage is listed as unmeasured
    for extra in (joins, aggregate):
        combined["cpu_s"] += extra.get("cpu_s", 0.0)
        combined["peak_rss_mb"] = max(combined["peak_rss_mb"], extra.get("peak_rss_mb", 0.0))
    return combined


def build(
    out: OutPath,
    parts: list[str],
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
    todo = [shard for shard in parts if shard not in merged.costed]
    paths = (throughput.part_cost_path(out, shard) for shard in todo)
    for shard, data in zip(todo, read_bytes(out, paths), strict=True):
        if data is not None:
            merged.add_cost(shard, data)  # its digest for the manifest: not read again to hash it
            if shard not in reused:
                throughput.add_cost(this_run, json.loads(data).get(READ, {}))
    totals = {stage: dict(cost) for stage, cost in merged.costs.items()}
    measured = len(merged.costed)
    for name in global_names:
        verified = merged.map_costs.get(name)
        combined = _global_cost(out, name, parts, totals.get(name, {}), verified)
        if combined:
            totals[name] = combined
    order = [READ, *stage_names, WRITE]
    stages = [_rates(name, totals[name]) for name in order if name in totals]
    section: dict[str, Any] = {
        "stages": stages,
        "cpu_s_total": round(sum(s["cpu_s"] for s in stages), 4),
        "parts": len(parts),
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
