"""Global stages in the data job, resumable per part: map (one task per part, persisted in
`.parts/global/<stage>/`: `<part>.rows.pq`, a `<part>.<table>.pq` per table `map_part` returned,
and last `<part>.json` with every file's bytes and sha256) -> aggregate (in the driver) -> join
(one task per part, then the map stages after the stage, then the next global stage's map or the
job's row files). A persisted map output is reused while its record verifies and it depends on the
same thing: the input (for the first global stage, its identity is the job fingerprint's) or the
digest of every part's map output of the global stages before it."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data_pipeline import parts, throughput, workers
from data_pipeline.parts import record_path, stage_dir
from data_pipeline.stage_types import AGGREGATE_SCRATCH
from data_pipeline.stages.base import GlobalStage, MapOutput, Stage, StageSpec, build_stage
from data_pipeline.timelimit import cpu_time
from pretrain import shards_layout as layout
from pretrain.errors import PretrainError, ray_get
from pretrain.storage import (
    ObjectPath,
    OutPath,
    confined,
    output_path,
    remove_tree,
    write_json,
)

GLOBAL = parts.GLOBAL
TASK_CPUS = 1.0
"""The stream is finished when these tasks run, so each may take a whole CPU."""


def _file(part: str, name: str) -> str:
    """`web-00003.rows.pq`: one table of a part's map output (`.pq`: no `DIR/**/*.parquet` reaches it)."""
    return f"{part}.{name}{layout.OTHER_PARQUET}"


def plan(stages: Sequence[Stage]) -> tuple[list[Stage], list[tuple[GlobalStage, list[Stage]]]]:
    """(map stages before the first global stage, [(global stage, map stages after it)])."""
    head: list[Stage] = []
    rest: list[tuple[GlobalStage, list[Stage]]] = []
    for stage in stages:
        if isinstance(stage, GlobalStage):
            rest.append((stage, []))
        elif rest:
            rest[-1][1].append(stage)
        else:
            head.append(stage)
    return head, rest


def persist(
    out: OutPath, stage: str, part: str, rows: pa.Table, tables: dict[str, pa.Table], **record: Any
) -> dict[str, Any]:
    """Write one part's map output and, last, its record."""
    files = {}
    stage_dir(out, stage).mkdir(parents=True, exist_ok=True)
    for name, table in {"rows": rows, **tables}.items():
        relative = f"{parts.PARTS}/{GLOBAL}/{stage}/{_file(part, name)}"
        files[name] = parts.write_parquet(table, out, relative, 1, compression="lz4")
    body = {"part": part, "rows": rows.num_rows, "files": files, **record}
    write_json(record_path(out, stage, part), body)
    return body


def load(
    out: OutPath,
    stage: str,
    part: str,
    rows: int,
    depends: str,
    listed: parts.Listing | None = None,
) -> MapOutput | None:
    """The part's persisted map output when its record verifies (module docstring), else None.
    With `listed` (an object store's listing of the stage's folder), a file of its recorded size
    written no later than its record keeps its recorded sha256 (parts.Listing.trusted): one GET per
    part, not the map output read back (about a second copy of the tagged corpus)."""
    where = record_path(out, stage, part)
    try:
        record = parts.load_json(where)
        files = record["files"]
        if record["rows"] != rows or record.get("depends", "") != depends:
            return None
        paths = {}
        folder = f"{parts.PARTS}/{GLOBAL}/{stage}"
        for name, entry in files.items():
            confined(stage_dir(out, stage), _file(part, name), f"map record {where}")
            rel = f"{folder}/{_file(part, name)}"
            if not parts.file_intact(out, rel, entry, f"{folder}/{part}.json", listed):
                return None
            paths[name] = str(out / rel)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return MapOutput(part, rows=paths.pop("rows"), files=paths, info=record.get("info", {}))


def digest(out: OutPath, stage: str, depends: str, outputs: Sequence[MapOutput]) -> str:
    """What a later global stage's map depends on: the sha256 every part's map record holds for
    each file (`load` has just checked them against the files), chained over the parts."""
    hasher = hashlib.sha256(depends.encode())
    records = parts.ordered(
        lambda output: parts.load_json(record_path(out, stage, output.part)),
        outputs,
        parts.in_flight_for(out),
    )
    for output, record in zip(outputs, records, strict=True):
        files = record["files"]
        for name in ("rows", *(n for n in files if n != "rows")):  # the rows file first
            hasher.update(f"{_file(output.part, name)}:{files[name]['sha256']}\n".encode())
    return hasher.hexdigest()


def reusable(out: OutPath, stage: GlobalStage, rows: dict[str, int], depends: str = "") -> set[str]:
    """The parts whose persisted map output verifies (`load`), checked `parts.READ_AHEAD` at a
    time in an object store."""
    found = loaded(out, stage.name, rows, depends)
    return {part for part, output in zip(rows, found, strict=True) if output is not None}


def loaded(
    out: OutPath, stage: str, rows: dict[str, int], depends: str
) -> Iterator[MapOutput | None]:
    """`load` of every part of `rows`, in order: in an object store from one listing of the
    stage's folder and `parts.READ_AHEAD` records at a time."""
    listed = None  # a local output: the hash cache answers without reading a file again
    if isinstance(out, ObjectPath):  # sizes and times of the stage's map output, from a listing
        listed = parts.Listing(out, (f"{parts.PARTS}/{GLOBAL}/{stage}",))
    yield from parts.ordered(
        lambda item: load(out, stage, item[0], item[1], depends, listed),
        rows.items(),
        parts.in_flight_for(out),
    )


def remove_all(out: OutPath) -> tuple[int, int, int]:
    """Delete every global stage's persisted map output; returns (files, bytes, links) removed (a
    link is removed as a link, its target kept). No manifest lists these files, so the artifact
    still verifies; a re-run that needs them maps the parts again (same bytes)."""
    root = out / parts.PARTS / GLOBAL
    if isinstance(root, Path) and root.is_symlink():
        remove_tree(root)
        return 0, 0, 1
    if not root.exists():
        return 0, 0, 0
    entries: list[OutPath] = list(root.rglob("*"))  # never descends into a linked directory
    links = [p for p in entries if isinstance(p, Path) and p.is_symlink()]
    files = [p for p in entries if p.is_file() and p not in links]
    size = sum(path.stat().st_size for path in files)
    remove_tree(root)
    if root.exists():
        raise PretrainError(
            f"could not remove all of {root} (permissions?); nothing outside it was touched: "
            "remove it by hand"
        )
    return len(files), size, len(links)


# --- what runs in the Ray tasks ---------------------------------------------------------------
_READY: dict[str, Stage] = {}
"""Stages this worker process has built from specs and set up (a worker sets each up once)."""


def _ready(spec: StageSpec) -> Stage:
    """The stage of `spec`, built and set up once per worker process."""
    key = json.dumps(spec, sort_keys=True, default=str)
    if key not in _READY:
        stage = build_stage(spec)
        stage.setup()
        _READY[key] = stage
    return _READY[key]


def map_task(
    out: str | OutPath,
    part: str,
    rows: int,
    spec: StageSpec,
    table: pa.Table | None = None,
    depends: str = "",
) -> str:
    """Map one part's rows with the global stage of `spec` and persist its map output: the first
    global stage's from the stream's row files, a later one's from `table` (what the join before it
    gave; `depends` is `digest` of every part's map output before it)."""
    target = output_path(out)
    if table is None:
        if load(target, spec[0], part, rows, ""):
            return part  # a retry of a task that persisted the part before its worker died
        table = workers.read_rows(target, part)
        if table.num_rows != rows:  # a row file is missing: never persist a partial part
            raise PretrainError(
                f"part {part}: {table.num_rows} of its {rows} rows were tagged; re-run the command"
            )
    stage = _ready(spec)
    assert isinstance(stage, GlobalStage)
    start = time.process_time()
    tables, info = stage.map_part(table)
    spent = {stage.name: time.process_time() - start}
    throughput.record_batch(out, f"map-{stage.name}", table, spent, docs=False)  # its join counts
    persist(target, stage.name, part, table, tables, info=info, depends=depends)
    return part  # the first stage's row files stay until every map is done: a duplicate reads them


def join_task(
    out: str | OutPath,
    job: dict[str, Any],
    part: MapOutput,
    index: int,
    *args: Any,
) -> str:
    """Join one part, run the map stages after the global stage, then the next global stage's
    map (persisted) or write the part's rows as the job's row files."""
    stage = _ready(job["spec"])
    assert isinstance(stage, GlobalStage)
    rows = pq.read_table(part.rows)
    outputs = {name: pq.read_table(part.files[name]) for name in stage.join_reads}
    start = time.process_time()
    table = stage.join_part(rows, outputs, index, *args)
    spent = {stage.name: time.process_time() - start}
    for after in (_ready(spec) for spec in job["after"]):
        start = cpu_time()
        table = after(table)
        spent[after.name] = cpu_time() - start
    throughput.record_batch(out, f"join-{stage.name}", rows, spent)
    if job["next"] is not None:
        map_task(out, part.part, table.num_rows, job["next"], table, job["depends"])
    else:
        workers.write_rows(table, out)
    return part.part


def run_global_stages(
    out: OutPath,
    stages: Sequence[Stage],
    rows: dict[str, int],
    timeout: float | None,
    keep: Callable[[str], Collection[str]],
    phase: Callable[[str], AbstractContextManager[None]],
) -> dict[str, int]:
    """Map (the parts not persisted yet), aggregate and join every global stage in order; the last
    join writes the job's row files. Returns {stage: parts whose map output was reused}. Once the
    last map output verifies, `keep(digest)` gets the global digest and returns the parts whose
    shards stay (runner.Published): their last join is skipped. `phase(name)` times each step."""
    import ray

    late = PretrainError(
        f"ray.timeout_s = {timeout}: a global stage did not finish in time; raise it, or "
        "check the cluster (`ray status`) for missing CPUs"
    )
    _, globals_ = plan(stages)
    remote_map = ray.remote(num_cpus=TASK_CPUS, max_retries=2)(map_task)
    remote_join = ray.remote(num_cpus=TASK_CPUS, max_retries=2)(join_task)
    names = sorted(rows)
    first = globals_[0][0]
    done = reusable(out, first, rows)
    with phase(f"{first.name}-map"):
        todo = [p for p in names if p not in done]
        ray_get(
            ray, [remote_map.remote(out, p, rows[p], first.spec()) for p in todo], timeout, late
        )
        remove_tree(out / parts.PARTS / parts.ROWS)  # every part is mapped and persisted
    reused, depends = {first.name: len(done)}, ""
    for k, (stage, after) in enumerate(globals_):
        with phase(f"{stage.name}-verify"):  # the driver checks every part's map output
            outputs = list(loaded(out, stage.name, {p: rows[p] for p in names}, depends))
        missing = [p for p, o in zip(names, outputs, strict=True) if o is None]
        if missing:
            raise PretrainError(
                f"{stage.name}: the map output of part {missing[0]} does not verify after it was "
                "written (another writer, or a disk error); re-run the command"
            )
        found = [o for o in outputs if o is not None]
        following = globals_[k + 1][0] if k + 1 < len(globals_) else None
        depends = digest(out, stage.name, depends, found)
        with phase(f"{stage.name}-aggregate"):
            joins = stage.aggregate(found)
        job = {
            "spec": stage.spec(),
            "after": [s.spec() for s in after],
            "next": following.spec() if following else None,
            "depends": depends,
        }
        if following is not None:
            skip = reusable(out, following, rows, depends)
            reused[following.name] = len(skip)
        else:
            skip = set(keep(depends))
        with phase(f"{stage.name}-join"):
            refs = [
                remote_join.remote(out, job, output, index, *joins[index])
                for index, output in enumerate(found)
                if output.part not in skip
            ]
            ray_get(ray, refs, timeout, late)
        remove_tree(stage_dir(out, stage.name) / AGGREGATE_SCRATCH)  # what its joins read
    return reused
