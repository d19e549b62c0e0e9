"""Distributed dedup on Ray: Ray tasks over hash partitions, no actors, nothing global in one
process. `dedup_parts` (DedupStage.aggregate, in the runner's driver) runs over input parts whose
map side is persisted (DedupStage.map_part):

- map: per persisted part, its band rows, exact rows, doc rows and signed rows, each split into
  P partitions (tasks.load_map_part)
- aggregate: buckets, verification, components, the kept document per cluster
  (data_pipeline.dedup.aggregate)
- join: the runner joins each part's tags back by row (DedupStage.join_part, tasks.attach)

Only tasks are used (1 CPU each), so the actor/CPU deadlock of Ray Data on small clusters cannot
occur here; every wait has a timeout that fails with a message instead of hanging
(data_pipeline.dedup.launch).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from data_pipeline.dedup import budget, tasks
from data_pipeline.dedup.aggregate import aggregate, stats_of
from data_pipeline.dedup.budget import DEFAULT_WORKER_MEMORY_MB
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.core import DedupStats
from data_pipeline.dedup.launch import Runner, wait_for_cpu
from data_pipeline.stagekit import AGGREGATE_SCRATCH, MapOutput
from pretrain.progress import Progress
from pretrain.storage import OutPath, output_path, remove_tree


def dedup_parts(
    parts: Sequence[MapOutput],
    config: DedupConfig,
    stage: Any,
    worker_memory_mb: int = DEFAULT_WORKER_MEMORY_MB,
) -> tuple[list[tuple[Any, ...]], DedupStats]:
    """The aggregate over input parts whose map side (tasks.map_tables) is persisted: for each
    part, the tag pieces its join (tasks.attach) needs; and the stats. Partitions come from the
    parts' sizes and `worker_memory_mb` (data_pipeline.dedup.budget). Every step exchanges its
    pieces through files beside the persisted map side (data_pipeline.dedup.exchange: local
    disk, or the output's object store on a cluster); the tags' files stay until the next
    aggregate (the joins read them)."""
    import ray

    if not parts:
        return [], DedupStats()
    documents = sum(int(p.info.get("documents", 0)) for p in parts)
    input_bytes = sum(output_path(f).stat().st_size for p in parts for f in p.files.values())
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    partitions, _ = budget.choose_partitions(documents, input_bytes, worker_memory_mb, cpus, config)
    wait_for_cpu(ray, config.task_timeout_s)
    folder = _exchange_folder(parts)
    run = Runner(config, folder)
    steps = Progress(total=5, desc="dedup", unit="step", leave=False)
    maps = run.scatter(
        "map",
        tasks.load_map_part,
        4,
        1,
        partitions,
        [(dict(p.files), dict(p.info), i, partitions) for i, p in enumerate(parts)],
    )
    tags = aggregate(run, maps, config, partitions, steps)
    steps.close()
    run.sweep()  # what the steps let go is deleted, and the disk peak recorded
    _remove_steps(folder, keep="-keep")  # only the tags' files are read after this (the joins)
    stats = stats_of(run, partitions)
    stats.extra["plan"] = {"partitions": partitions, "worker_memory_mb": worker_memory_mb}
    stats.extra["exchange"] = run.scratch.summary()
    joins = [tuple(tags[i % partitions]) for i in range(len(parts))]
    if config.index.save_to:
        from data_pipeline.dedup.index import save_index

        tagged = (
            ray.get(run.launch(tasks.attach_file, 1, part.rows, i, *joins[i])[0])
            for i, part in enumerate(parts)
        )
        save_index(config.index.save_to, tagged, config, tagged=True)
    stage.cost, stage.timeline = run.cost(), run.timeline
    return joins, stats


def _remove_steps(folder: OutPath, keep: str) -> None:
    """Remove the exchange files of every step but those whose name ends with `keep`."""
    for step in folder.iterdir():
        if not step.name.endswith(keep):
            remove_tree(step)


def _exchange_folder(parts: Sequence[MapOutput]) -> OutPath:
    """A fresh folder for this aggregate's exchange files, beside the persisted map side; the
    folders of earlier runs (a driver killed mid-aggregate, or the joins' tags of the last run)
    are removed first. A task of a killed driver still writing writes into its own old folder."""
    root = output_path(parts[0].rows).parent / AGGREGATE_SCRATCH
    remove_tree(root)
    return root / uuid.uuid4().hex
