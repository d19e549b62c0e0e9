"""The data job's Ray side: connect, the stream, the global stages, the merge (runner.py plans
the work before and writes the ledger and manifest after).

    inputs --read_files (tasks, streaming)--> raw batches (`_shard`, `_row` name each row's part)
           --MapStagesWorker (actor pool, fractional CPUs; the map stages before any global
             stage, then the first global stage's map side when it is row-wise:
             data_pipeline.piece_maps)--> pieces (written by the map actors)
    global --for each global stage (data_pipeline.global_parts): map each part (persisted per
             part; the first stage's map of a part starts as soon as the stream has finished it,
             data_pipeline.early_maps) -> aggregate in the driver -> join each part, then the map
             stages after it --> the next global stage's map, or the job's pieces
    merge  --one task per shard: pieces in row order -> the select -> data/<stem>-<part>.parquet,
             _rejects/<stem>-<part>.pq, .parts/<stem>-<part>.json (ledger fragment)
(the layout: pretrain.shards_layout)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from data_pipeline import (
    collect,
    early_maps,
    execute,
    global_parts,
    merge,
    parts,
    resume,
    throughput,
    workers,
)
from data_pipeline.config import PipelineConfig
from data_pipeline.readers import Fields
from data_pipeline.stages.base import Stage
from pretrain.progress import VERBOSE, Progress, verbosity, watch
from pretrain.storage import OutPath, remove_tree


def connect_ray(config: PipelineConfig, address: str | None) -> bool:
    """Connect to a cluster (argument, config, RAY_ADDRESS) or start a local Ray. True if started
    (then Ray Data's per-driver actors are started with it: `rayinit.warm_ray_data`)."""
    from pretrain import rayinit

    started = rayinit.connect(
        address or config.ray.address,
        num_cpus=config.ray.num_cpus,
        object_store_mb=config.ray.object_store_mb,
    )
    if started:
        rayinit.warm_ray_data()
    return started


def _read_resources(actors: bool, cpus: int) -> dict[str, Any]:
    """Ray options of the read tasks. Beside the stage actor pool they reserve no CPU, at most
    one task per CPU of the cluster at start: when a node dies, Ray restarts its stage actors on
    the nodes left and they may take every CPU there (a 1-CPU head holds two 0.5-CPU actors),
    while the reads that must run again (their node died with their output blocks) would wait for
    a CPU forever (the job stalled until ray.timeout_s). Without actors, reads and piece writes
    are one task that keeps a fractional CPU."""
    import ray.data

    if not actors:
        return {"num_cpus": 0.25}
    return {"num_cpus": 0, "compute": ray.data.TaskPoolStrategy(size=cpus)}


def _max_input_bytes(stages: list[Stage]) -> int | None:
    """The smallest record size limit of the stages: what one record may make a reader hold."""
    limits = [limit for s in stages if (limit := s.record_limit()) is not None]
    return min(limits, default=None)


@contextmanager
def _original_errors() -> Iterator[None]:
    """Datasets built in this block raise their map functions' own errors, not Ray Data's
    UserCodeException raised from them: a pickled exception loses its `__cause__`, so the
    driver got Ray's many lines, not a worker's one-line refusal (a fence, a changed piece)."""
    import ray.data

    context = ray.data.DataContext.get_current()  # each dataset copies it when built
    saved = context.raise_original_map_exception
    context.raise_original_map_exception = True
    try:
        yield
    finally:
        context.raise_original_map_exception = saved


def build_stream(
    config: PipelineConfig,
    stages: list[Stage],
    todo: list[dict[str, str]],
    out: OutPath,
    done: dict[str, set[int]],
) -> Any:
    import ray

    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    options = {
        "shard_rows": config.shard_rows,
        "batch_rows": config.batch_rows,
        "eval_fraction": config.eval_fraction,
        "fields": Fields(text=config.text_field, id=config.id_field),
        "on_unreadable": config.on_unreadable,
        "max_input_bytes": _max_input_bytes(stages),
    }
    with _original_errors():
        return _stream(config, stages, todo, out, done, cpus, options)


def _stream(
    config: PipelineConfig,
    stages: list[Stage],
    todo: list[dict[str, str]],
    out: OutPath,
    done: dict[str, set[int]],
    cpus: int,
    options: dict[str, Any],
) -> Any:
    import ray

    head, globals_ = global_parts.plan(stages)
    first = globals_[0][0] if globals_ else None
    map_spec = first.spec() if first is not None and first.maps_in_stream() else None
    ds = ray.data.from_items(todo, override_num_blocks=len(todo)).map_batches(
        workers.read_files,
        batch_size=1,
        batch_format="pyarrow",
        **_read_resources(bool(head), cpus),
        fn_kwargs={
            "out": out,
            "skip": {k: sorted(v) for k, v in done.items()},
            "options": options,
        },
    )
    if not head:
        return ds.map_batches(
            workers.write_pieces,
            batch_format="pyarrow",
            batch_size=None,
            num_cpus=0.25,
            fn_kwargs={"out": out},
        )
    return ds.map_batches(
        workers.MapStagesWorker,
        fn_constructor_kwargs={
            "specs": [s.spec() for s in head],
            "pieces_out": out,
            "cost_out": out,
            "batch_rows": config.batch_rows,
            "map_spec": map_spec,  # the first global stage's map, per piece (piece_maps)
        },
        batch_size=None,  # one block per call: blocks, not bundles of them, are dealt to actors
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=config.ray.workers or cpus),
        num_cpus=config.ray.cpus_per_worker,
    )


EXECUTOR_WAIT_S = 0.5
"""How long Ray Data's streaming executor waits for its running tasks before each scheduling
step (Ray's default: 0.1 s). Its `ray.wait` asks for every running task, so it returns early only
when all are done: the driver ran a full step (usage, backpressure, dispatch, stats) ten times a
second whatever happened, ~1.5-3 CPU-s of a 2-core run. Every stage actor holds a second task
queued (Ray Data's default), so a later step idles none; a dataset's end is seen up to 0.5 s
later."""


@contextmanager
def _executor_wait(seconds: float) -> Iterator[None]:
    """Ray Data's streaming executor steps at most every `seconds` in this block (a Ray without
    that module constant is left as it is)."""
    from ray.data._internal.execution import streaming_executor_state as state

    name = "WAIT_FOR_TASK_COMPLETION_TIMEOUT_S"
    saved = getattr(state, name, None)
    if saved is not None:
        setattr(state, name, seconds)
    try:
        yield
    finally:
        if saved is not None:
            setattr(state, name, saved)


MERGE_CPUS = 0.5
"""CPUs one merge task reserves (the stream is done when they run)."""


def build_merge(
    config: PipelineConfig,
    stages: list[Stage],
    out: OutPath,
    todo_stems: list[str],
    done: dict[str, set[int]],
) -> Any:
    """A dataset of one row per unfinished shard, mapped through merge.merge_shards."""
    import ray

    shards = []
    for stem, record in zip(todo_stems, parts.read_records(out, todo_stems), strict=True):
        if record is None:
            raise FileNotFoundError(parts.read_stats_path(out, stem))  # the stream wrote it
        count = record["parts"]
        shards += [f"{stem}-{p:05d}" for p in range(count) if p not in done.get(stem, set())]
    writer = {
        "out": out,
        "stages": [s.name for s in stages],
        "fields": [field for s in stages for field in s.columns],
        "drop": config.select.drop,
        "rejects_mode": config.rejects.mode,
        "sample_per_reason": config.rejects.sample_per_reason,
        "level": config.compression_level,
    }
    with _original_errors():
        return ray.data.from_items(
            [{"shard": s} for s in shards], override_num_blocks=max(1, len(shards))
        ).map_batches(
            merge.merge_shards,
            batch_size=1,
            batch_format="pyarrow",
            num_cpus=MERGE_CPUS,
            fn_kwargs=writer,
        )


def _early_maps(config: PipelineConfig, stages: list[Stage], out: OutPath) -> early_maps.EarlyMaps:
    """The first global stage's map of each part the stream finishes, started at once."""
    _, globals_ = global_parts.plan(stages)
    spec = globals_[0][0].spec()
    remote = global_parts.remote_map_task()

    def submit(part: str, rows: int) -> Any:
        return remote.remote(out, part, rows, spec, keep_pieces=True)

    return early_maps.EarlyMaps(out, config.shard_rows, submit)


def _counting(tagged: execute.Tally, early: early_maps.EarlyMaps | None) -> Any:
    """What sees each output block of the stream: the tally, and the early maps."""
    if early is None:
        return tagged.add

    def on_block(block: Any) -> None:
        tagged.add(block)
        early.add(block)

    return on_block


def run_ray(
    config: PipelineConfig,
    stages: list[Stage],
    work: resume.Work,
    out: OutPath,
    done: dict[str, set[int]],
    ray_address: str | None,
    progress: bool,
    clock: throughput.RunClock,
    merged: collect.Merged | None = None,
) -> tuple[str, dict[str, int]]:
    """Stream the inputs to read through the map stages into pieces, run the global stages over
    every part, then merge the pieces into shards; `merged` folds each output block of the merge
    (each part's fragment and cost record) and the global stages' map costs, none of which is
    kept (data_pipeline.collect)."""
    started = clock.start_ray(lambda: connect_ray(config, ray_address))
    import ray.data

    from pretrain import rayinit

    context = ray.data.DataContext.get_current()
    saved = context.enable_progress_bars, context.target_max_block_size
    # Our progress display is the job's; Ray Data's own bars only with -v (they go to the log).
    context.enable_progress_bars = progress and verbosity() >= VERBOSE
    # Small blocks, so one big input file still spreads over every stage actor.
    context.target_max_block_size = config.ray.block_mb * 2**20
    stream_stats, reused = "", {}
    begin = time.perf_counter()
    clock.cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    try:
        with _executor_wait(EXECUTOR_WAIT_S):  # the stream and the merge are Ray Data jobs
            throughput.clear(out)
            remove_tree(out / parts.PARTS / parts.PIECES)
            remove_tree(out / parts.PARTS / parts.PROGRESS)
            clock.marker = parts.phase_path(out)
            stems = [t["stem"] for t in work.read]
            bar = Progress(desc="data run: tag", unit="docs", disable=not progress)
            tagged = execute.Tally()
            early = _early_maps(config, stages, out) if work.globals else None
            if work.read:
                with (
                    watch(
                        bar,
                        lambda: (
                            tagged.rows,
                            parts.records_to_read(out, stems, work.skip, config.shard_rows),
                        ),
                    ),
                    clock.phase("stream"),
                ):
                    dataset = build_stream(config, stages, work.read, out, work.skip)
                    _, stream_stats = execute.run(
                        dataset, config.ray.timeout_s, _counting(tagged, early)
                    )
                    workers.raise_refusal(out)  # a map actor's, when no block reached it
            if work.globals:
                rows = global_parts.expected_rows(out, work.merge, config.shard_rows)
                reused = global_parts.run_global_stages(
                    out,
                    stages,
                    rows,
                    config.ray.timeout_s,
                    clock.phase,
                    early.started if early is not None else None,
                    merged.map_costs if merged is not None else None,
                )
            with clock.phase("merge"):
                merging = build_merge(config, stages, out, work.merge, done)
                on_merged = merged.add if merged is not None else None
                _, merge_stats = execute.run(
                    merging, config.ray.timeout_s, on_merged, keep=merged is None
                )
    finally:
        context.enable_progress_bars, context.target_max_block_size = saved
        clock.ray_work_s = time.perf_counter() - begin
        rayinit.shutdown(started)
    return f"{stream_stats}\n{merge_stats}", reused
