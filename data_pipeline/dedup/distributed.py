"""Distributed dedup on Ray: Ray tasks over hash partitions, no actors, nothing global in one
process. The two entry points, over a Ray Dataset's blocks (`dedup_dataset`, DedupStage.apply)
and over input parts whose map side is persisted (`dedup_parts`, the runner), share the
aggregate (data_pipeline.dedup.aggregate: buckets, verification, components, the kept document
per cluster) and differ in the map step before it and the join back after it:

- map: per slice of a block (data_pipeline.dedup.budget), or per persisted part, signatures ->
  band rows, exact rows, doc rows and signed rows, each split into P partitions
- attach: per slice, tags joined back by (slice, row), order kept: lazily, as the returned
  dataset is read (data_pipeline.dedup.lazyattach), or with `index.save_to` before returning,
  each input block freed once its slices are tagged when the input was handed over
  (dedup_dataset); the runner joins each part itself (DedupStage.join_part)

Only tasks are used (1 CPU each), so the actor/CPU deadlock of Ray Data on small clusters cannot
occur here; every wait has a timeout that fails with a message instead of hanging
(data_pipeline.dedup.launch).
"""

from __future__ import annotations

import atexit
import time
import uuid
from collections.abc import Sequence
from typing import Any

from data_pipeline.dedup import budget, tasks
from data_pipeline.dedup.aggregate import aggregate, stats_of
from data_pipeline.dedup.budget import DEFAULT_WORKER_MEMORY_MB
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.core import DedupStats
from data_pipeline.dedup.launch import Runner, wait_for_cpu
from data_pipeline.dedup.lazyattach import tagged_dataset
from data_pipeline.stagekit import AGGREGATE_SCRATCH, MapOutput
from pretrain.outstore import OutPath, output_path, remove_tree
from pretrain.progress import Progress


def _blocks(materialized: Any) -> tuple[list[Any], list[tuple[int, int]]]:
    """Block refs and their (rows, bytes) from the dataset's metadata (nothing is fetched)."""
    refs, sizes = [], []
    for bundle in materialized.iter_internal_ref_bundles():
        for entry in bundle.blocks:
            ref, meta = (entry.ref, entry.metadata) if hasattr(entry, "ref") else entry
            refs.append(ref)
            sizes.append((int(meta.num_rows or 0), int(meta.size_bytes or 0)))
    return refs, sizes


def dedup_dataset(
    dataset: Any,
    config: DedupConfig,
    stage: Any,
    worker_memory_mb: int = DEFAULT_WORKER_MEMORY_MB,
    exchange_dir: str | None = None,
) -> tuple[Any, DedupStats]:
    """Tag every row of a Ray Dataset; returns (dataset with the dedup columns, stats). Slices
    and partitions come from the input's size and `worker_memory_mb` (data_pipeline.dedup.budget).
    With `exchange_dir` (a folder every worker reads and writes: local disk on one node, a shared
    file system or s3:// on a cluster), the aggregate's steps exchange their pieces through files
    in a fresh subfolder (data_pipeline.dedup.exchange), not as Ray objects (the same tags).
    Each step's files go once read, but the tags' files (`stats.extra["exchange_tags"]`, ~100
    bytes per document) stay until DedupStage.close() or the interpreter's exit: reading the
    lazy result, or Ray rebuilding a lost tagged block, reads them (_keep_until_exit).

    The result is lazy (data_pipeline.dedup.lazyattach.tagged_dataset): the aggregate is done
    when this returns, the join back of each slice runs when the consumer reads it, so the
    object store never holds the whole tagged output; the result holds the input blocks until
    it is dropped. With `config.index.save_to` the tagged blocks are computed here instead
    (_attach_streaming; the index is saved from them): then, when `dataset` is handed over in a
    one-item list (which this empties) and the caller keeps no other reference, each input
    block is freed as its tagged blocks appear; `stats.extra["input_blocks_held_after_attach"]`
    counts the input blocks still referenced then (Ray's reference table).
    `stats.extra["attach"]`: "lazy" or "eager"."""
    import ray

    materialized = (dataset.pop() if isinstance(dataset, list) else dataset).materialize()
    del dataset
    blocks, sizes = _blocks(materialized)
    if not blocks or sum(rows for rows, _ in sizes) == 0:
        return materialized, DedupStats()
    del materialized  # from here `blocks` is this function's only hold on the input
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    cap = budget.MAX_PARTITIONS if exchange_dir is None else budget.MAX_FILE_PARTITIONS
    plan = budget.plan(sizes, worker_memory_mb, cpus, config, cap)
    partitions = plan.partitions
    wait_for_cpu(ray, config.task_timeout_s)
    folder = None if exchange_dir is None else output_path(exchange_dir) / uuid.uuid4().hex
    run = Runner(config, None if folder is None else str(folder))
    steps = Progress(total=6, desc="dedup", unit="step", leave=False)
    maps = run.scatter(
        "map",
        tasks.map_block,
        4,
        1,
        partitions,
        [(blocks[b], s, lo, n, config, partitions) for s, (b, lo, n) in enumerate(plan.slices)],
    )
    tags = aggregate(run, maps, config, partitions, steps, (blocks, plan.slices))
    _remove_steps(folder, keep="-keep")
    if config.index.save_to:  # the index is saved from the tagged blocks: attach them now
        out, held = _attach_streaming(run, blocks, plan.slices, tags, partitions)
        result = ray.data.from_arrow_refs(out)
    else:
        if run.producing:  # the tags' files exist once their producers end
            run.wait(run.producing, "exchange")
        cost_key = uuid.uuid4().hex
        result = tagged_dataset(blocks, sizes, plan.slices, tags, partitions, cost_key)
        held = -1
        blocks.clear()  # from here only the returned dataset holds the input blocks
    steps.update()
    steps.close()
    stats = stats_of(run, partitions)
    stage.cost, stage.timeline = run.cost(), run.timeline
    stats.extra["plan"] = {**plan.describe(), "worker_memory_mb": worker_memory_mb}
    stats.extra["attach"] = "eager" if config.index.save_to else "lazy"
    if held >= 0:
        stats.extra["input_blocks_held_after_attach"] = held
    else:  # the lazy attach's reads record their CPU under this key (DedupStage.attach_cost)
        stats.extra["attach_cost_key"] = cost_key
    if folder is not None:
        stats.extra["exchange_tags"] = _keep_until_exit(folder)
    if config.index.save_to:
        from data_pipeline.dedup.index import save_index

        save_index(config.index.save_to, (ray.get(ref) for ref in out), config, tagged=True)
    return result, stats


_KEPT: set[str] = set()
"""Tag folders of `dedup_dataset` runs in this process not yet released (release_tags)."""


def _keep_until_exit(folder: OutPath) -> str:
    """Keep an apply's tags' files past its return: each tagged block is a Ray object whose
    lineage is its attach task, so Ray rebuilds a lost block (its node died before the consumer
    read it) by running that attach again, which reads them. Removed by release_tags
    (DedupStage.close) or at the interpreter's exit."""
    _KEPT.add(str(folder))
    return str(folder)


def release_tags(folders: Sequence[str]) -> None:
    """Remove the folders `dedup_dataset` kept (_keep_until_exit): the tagged output must not
    need rebuilding from them any more (written, or no longer used)."""
    for folder in folders:
        if folder in _KEPT:
            remove_tree(output_path(folder))
            _KEPT.discard(folder)


atexit.register(lambda: release_tags(sorted(_KEPT)))


def _attach_streaming(
    run: Runner, blocks: list[Any], slices: Sequence[tuple[int, int, int]], tags: list, parts: int
) -> tuple[list[Any], int]:
    """One attach task per slice, in block order; the driver's refs to the input blocks are
    dropped (emptying `blocks`) once every task is submitted, so a block lives only until its
    last slice is tagged. Returns (the tagged slices' refs, input blocks still referenced once
    all are tagged)."""
    ids = [ref.hex().encode() for ref in blocks]
    out = [
        run.launch(tasks.attach, 1, blocks[b], s, lo, n, *tags[s % parts])[0]
        for s, (b, lo, n) in enumerate(slices)
    ]
    blocks.clear()
    ready, _ = run.ray.wait(out, num_returns=len(out), timeout=run.timeout, fetch_local=False)
    if len(ready) < len(out):
        raise RuntimeError(
            f"dedup step 'attach' waited more than task_timeout_s={run.timeout} s; check "
            "`ray status`: actors may be holding every CPU (see the Ray deadlock note)"
        )
    run.timeline.append(("attach", time.time()))
    counts = run.ray._private.worker.global_worker.core_worker.get_all_reference_counts()
    # held by a reference in this process ("local"); a finished task's hold on its argument
    # ("submitted") is released asynchronously after ray.wait returns, so it is not counted
    return out, sum(1 for i in ids if counts.get(i, {}).get("local", 0) > 0)


def dedup_parts(
    parts: Sequence[MapOutput],
    config: DedupConfig,
    stage: Any,
    worker_memory_mb: int = DEFAULT_WORKER_MEMORY_MB,
    files: bool = True,
) -> tuple[list[tuple[Any, ...]], DedupStats]:
    """The aggregate over input parts whose map side (tasks.map_tables) is persisted: for each
    part, the tag pieces its join (tasks.attach) needs; and the stats. Partitions come from the
    parts' sizes and `worker_memory_mb` (data_pipeline.dedup.budget). With `files`, every step
    exchanges its pieces through files beside the persisted map side (data_pipeline.dedup.
    exchange; the tags' files stay until the next aggregate, the joins read them); else as Ray
    objects (the same tags)."""
    import ray

    sizes = [
        (
            int(p.info.get("documents", 0)),
            sum(output_path(f).stat().st_size for f in p.files.values()),
        )
        for p in parts
    ]
    if not parts:
        return [], DedupStats()
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    cap = budget.MAX_FILE_PARTITIONS if files else budget.MAX_PARTITIONS
    plan = budget.plan(sizes, worker_memory_mb, cpus, config, cap)
    partitions = plan.partitions
    wait_for_cpu(ray, config.task_timeout_s)
    folder = _exchange_folder(parts) if files else None
    run = Runner(config, None if folder is None else str(folder))
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
    if run.scratch is not None:
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


def _remove_steps(folder: OutPath | None, keep: str | None = None) -> None:
    """Remove the exchange files of every step but those whose name ends with `keep` (all, and
    the folder, when `keep` is None)."""
    if folder is None:
        return
    if keep is None:
        remove_tree(folder)
        return
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
