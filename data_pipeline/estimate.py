"""`pretrain data estimate`: a data job at scale projected from a sample run's measured per-stage
costs (its manifest's `throughput` section). Every stage is taken as linear in the input bytes
(the dedup graph's growth and a cluster's shuffle a sample cannot show); peak memory per node is
each phase's processes per node times the peak RSS the sample measured for them; output files
are documents / `shard_rows` parts times the files the sample left per part.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_pipeline.config import PipelineConfig
from data_pipeline.global_parts import TASK_CPUS
from data_pipeline.ray_job import MERGE_CPUS
from data_pipeline.stages.base import GlobalStage
from data_pipeline.stages.registry import stage_class
from pretrain import shards_layout as layout
from pretrain.errors import ConfigError
from pretrain.manifest import load_manifest

UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15}
UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "PIB": 2**50}


def parse_bytes(text: str) -> int:
    """`40TB`, `5 TB`, `1.5PiB`, `123` -> bytes (decimal units: TB = 10^12)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in UNITS or float(match.group(1)) <= 0:
        raise ConfigError(
            f"--input-bytes {text!r}: give a positive size such as 40TB, 500GB or 2PiB"
        )
    return int(float(match.group(1)) * UNITS[unit])


@dataclass
class Sample:
    """What the sample run measured (its manifest's throughput section and counts)."""

    directory: Path
    stages: dict[str, dict[str, Any]]
    bytes_in: int
    docs_in: int
    shard_bytes: int
    reject_bytes: int
    utilisation: float | None
    ray_start_s: float
    files_per_part: float = 0.0
    """Shard, rejects and part record: what each part of the sample left (0: no part)."""


def _missing(directory: Path, what: str) -> ConfigError:
    return ConfigError(
        f"sample manifest {directory} has no measured {what}; run `pretrain data run` on a "
        "sample with the same stages (this version records per-stage CPU-seconds) and pass "
        "its output as --from-manifest"
    )


def load_sample(directory: Path, stages: list[str]) -> Sample:
    """Read the sample's costs; a one-line error when a stage of CONFIG was not measured."""
    manifest = load_manifest(directory)
    section = manifest.get("throughput")
    if not isinstance(section, dict) or not section.get("stages"):
        raise _missing(directory, "per-stage costs (manifest `throughput` section)")
    measured = {s["stage"]: s for s in section["stages"] if s.get("cpu_s", 0) > 0 and s["bytes"]}
    for name in ["read", *stages, "write"]:
        if name not in measured:
            raise _missing(directory, f"cost for stage {name!r} (enabled in CONFIG)")
    files = manifest.get("files", {})
    run = section.get("run")
    utilisation = None
    if run and run.get("ray_work_s") and run.get("cpus"):
        utilisation = min(1.0, section["cpu_s_total"] / (run["ray_work_s"] * run["cpus"]))
    return Sample(
        files_per_part=files_per_part(files),
        directory=directory,
        stages=measured,
        bytes_in=measured["read"]["bytes"],
        docs_in=manifest["counts"]["documents_in"],
        shard_bytes=sum(files[k]["bytes"] for k in layout.kept_files(files)),
        reject_bytes=sum(
            v["bytes"] for k, v in files.items() if k.startswith(f"{layout.REJECTS_DIR}/")
        ),
        utilisation=utilisation,
        ray_start_s=(section.get("fixed") or {}).get("ray_start_s", 0.0),
    )


def files_per_part(listed: dict[str, Any]) -> float:
    """Shards and rejects per part record, plus the record: what each part leaves (0: none)."""
    records = sum(bool(re.fullmatch(r"\.parts/.+-\d{5,}\.json", name)) for name in listed)
    shards = sum(
        name.startswith((f"{layout.DATA_DIR}/", f"{layout.REJECTS_DIR}/")) for name in listed
    )
    return shards / records + 1 if records else 0.0


def _files(sample: Sample, config: PipelineConfig, documents: int) -> dict[str, Any]:
    """The projected output files (module docstring); {} when the sample has no part."""
    if not sample.files_per_part:
        return {}
    parts = math.ceil(documents / config.shard_rows)
    listed = int(parts * sample.files_per_part)
    return {"parts": parts, "shard_rows": config.shard_rows, "listed": listed}


def _memory(
    sample: Sample, config: PipelineConfig, stages: list[str], nodes: int, cpus: int
) -> dict[str, float]:
    """Peak RSS per node of each phase, in GB (see the module docstring)."""
    rss = {name: cost["peak_rss_mb"] / 1e3 for name, cost in sample.stages.items()}
    workers = config.ray.workers or nodes * cpus
    per_worker = config.ray.cpus_per_worker
    actors = min(math.ceil(workers / nodes), math.floor(cpus / per_worker))
    readers = cpus  # read tasks reserve no CPU beside the actors, at most one per CPU
    global_names = [s for s in stages if issubclass(stage_class(s), GlobalStage)]
    map_names = [s for s in stages if s not in global_names]
    phases = {
        "map": actors * max(rss[s] for s in map_names) + readers * rss["read"],
        "write": math.floor(cpus / MERGE_CPUS) * rss["write"],
    }
    for name in global_names:
        phases[name] = math.floor(cpus / TASK_CPUS) * rss[name]
    return {k: round(v, 2) for k, v in phases.items()}


def project(
    sample: Sample,
    config: PipelineConfig,
    input_bytes: int,
    nodes: int,
    cpus_per_node: int,
    utilisation: float | None = None,
) -> dict[str, Any]:
    """The projection as a dict (printed by `format_estimate`)."""
    stages = config.enabled_stages()
    per_stage = {
        name: sample.stages[name]["cpu_s"] / sample.stages[name]["bytes"] * input_bytes / 3600
        for name in ["read", *stages, "write"]
    }
    cpu_hours = sum(per_stage.values())
    used = utilisation or sample.utilisation or 1.0
    total_cpus = nodes * cpus_per_node
    wall_h = cpu_hours / (total_cpus * used) + sample.ray_start_s / 3600
    memory = _memory(sample, config, stages, nodes, cpus_per_node)
    scale = input_bytes / sample.bytes_in
    return {
        "input_bytes": input_bytes,
        "nodes": nodes,
        "cpus_per_node": cpus_per_node,
        "sample": {"directory": str(sample.directory), "bytes": sample.bytes_in},
        "cpu_hours_by_stage": {k: round(v, 3) for k, v in per_stage.items()},
        "cpu_hours": round(cpu_hours, 3),
        "utilisation": round(used, 3),
        "utilisation_source": "given" if utilisation else "sample" if sample.utilisation else "1",
        "wall_hours": round(wall_h, 4),
        "node_hours": round(wall_h * nodes, 3),
        "node_hours_compute_bound": round(cpu_hours / cpus_per_node, 3),
        "peak_memory_gb_per_node": max(memory.values()),
        "memory_gb_by_phase": memory,
        "output_bytes": int(sample.shard_bytes * scale),
        "rejects_bytes": int(sample.reject_bytes * scale),
        "documents": int(sample.docs_in * scale),
        "files": _files(sample, config, int(sample.docs_in * scale)),
        "warnings": _warnings(sample, used, utilisation),
    }


SMALL_SAMPLE_BYTES = 100 * 10**6


def _warnings(sample: Sample, used: float, given: float | None) -> list[str]:
    """What makes this projection less trustworthy, in words."""
    notes = []
    if sample.bytes_in < SMALL_SAMPLE_BYTES and given is None and used < 0.5:
        notes.append(
            f"the sample's utilisation {used:.3f} is mostly fixed cost (Ray scheduling, actor "
            f"set-up) in a {_size(sample.bytes_in)} sample: run a larger sample or pass "
            "--utilisation; the compute-bound figure assumes every CPU busy"
        )
    return notes


def _size(value: float) -> str:
    for unit in ("PB", "TB", "GB", "MB", "KB"):
        if value >= UNITS[unit]:
            return f"{value / UNITS[unit]:.2f} {unit}"
    return f"{value:.0f} B"


def _files_line(files: dict[str, Any]) -> list[str]:
    if not files:
        return []
    return [
        f"  files: ~{files['listed']:,} listed + 1 per input file (~{files['parts']:,} parts of "
        f"shard_rows {files['shard_rows']:,}; fewer: raise shard_rows)"
    ]


def format_estimate(result: dict[str, Any]) -> str:
    """Human-readable lines; the first one is the answer."""
    stages = ", ".join(f"{k} {v:,.1f}" for k, v in result["cpu_hours_by_stage"].items())
    memory = ", ".join(f"{k} {v:,.1f}" for k, v in result["memory_gb_by_phase"].items())
    return "\n".join(
        [
            f"{_size(result['input_bytes'])} on {result['nodes']} nodes x "
            f"{result['cpus_per_node']} CPUs: {result['wall_hours']:,.2f} h wall, "
            f"{result['node_hours']:,.1f} node-hours, peak "
            f"{result['peak_memory_gb_per_node']:,.1f} GB/node, output "
            f"{_size(result['output_bytes'])} of shards",
            f"  CPU-hours by stage: {stages} (total {result['cpu_hours']:,.1f})",
            f"  utilisation {result['utilisation']} ({result['utilisation_source']}); "
            f"compute-bound lower bound {result['node_hours_compute_bound']:,.1f} node-hours",
            f"  memory GB/node by phase (Ray object store apart): {memory}",
            f"  rejects {_size(result['rejects_bytes'])}, ~{result['documents']:,} documents; "
            f"from sample {result['sample']['directory']} ({_size(result['sample']['bytes'])})",
            *_files_line(result["files"]),
            *(f"  note: {note}" for note in result["warnings"]),
        ]
    )
