"""The data job's Ray side, one function per step the runner calls inside `session`: `stream`
(read tasks -> the map stages before any global stage, on an actor pool -> row files per part),
the global stages (data_pipeline.global_parts), `merge` (one task per part: row files -> the
select -> shard, rejects, part record)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from data_pipeline import global_parts, ledger, parts, throughput, workers
from data_pipeline.config import PipelineConfig
from data_pipeline.stages.base import Stage
from pretrain.errors import PretrainError, raise_pretrain_cause
from pretrain.progress import VERBOSE, Progress, verbosity, watch
from pretrain.rayinit import patched
from pretrain.storage import OutPath, remove_tree


def read_options(config: PipelineConfig, stages: list[Stage]) -> dict[str, Any]:
    """What `workers.read_files` passes the reader (`readers.read_unit`): `max_input_bytes` is the
    smallest record size limit of the stages, what one record may make a reader hold."""
    limits = [limit for s in stages if (limit := s.record_limit()) is not None]
    return {
        "shard_rows": config.shard_rows,
        "batch_rows": config.batch_rows,
        "eval_fraction": config.eval_fraction,
        "fields": config.fields(),
        "on_unreadable": config.on_unreadable,
        "max_input_bytes": min(limits, default=None),
    }


def _original_errors() -> AbstractContextManager[None]:
    """Datasets built in this block raise their map functions' own errors, not Ray Data's
    UserCodeException (pickled, it loses its `__cause__`: the user got Ray's many lines, not a
    worker's one-line refusal). Each dataset copies the context when it is built."""
    import ray.data

    return patched(ray.data.DataContext.get_current(), raise_original_map_exception=True)


def stream(
    config: PipelineConfig,
    stages: list[Stage],
    read: list[dict[str, str]],
    skip: set[str],
    out: OutPath,
    progress: bool,
) -> None:
    """Read the inputs `read` (less the parts in `skip`) through the map stages before the first
    global stage into row files. Progress counts the tagged rows."""
    import ray

    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    head, _ = global_parts.plan(stages)
    # The read tasks reserve no CPU beside the stage actor pool, at most one task per CPU of the
    # cluster at start: when a node dies, Ray restarts its stage actors on the nodes left and
    # they may take every CPU there (a 1-CPU head holds two 0.5-CPU actors), while the reads
    # that must run again (their node died with their output blocks) would wait for a CPU forever.
    with _original_errors():
        dataset = ray.data.from_items(read, override_num_blocks=len(read)).map_batches(
            workers.read_files,
            batch_size=1,
            batch_format="pyarrow",
            num_cpus=0,
            compute=ray.data.TaskPoolStrategy(size=cpus),
            fn_kwargs={
                "out": out,
                "skip": frozenset(skip),
                "options": read_options(config, stages),
            },
        )
        dataset = dataset.map_batches(
            workers.MapStagesWorker,
            fn_constructor_kwargs={
                "specs": [s.spec() for s in head],
                "out": out,
                "batch_rows": config.batch_rows,
            },
            batch_size=None,  # one block per call: blocks, not bundles, are dealt to actors
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=config.ray.workers or cpus),
            num_cpus=config.ray.cpus_per_worker,
        )
    stems = [item["stem"] for item in read]
    # Rows tagged so far, from the output blocks as the driver receives them (one row per row
    # file written: its rows). Ray hands each output over once, whichever worker made it: a task
    # retried, an actor restarted or an object rebuilt after a node died is not counted twice.
    tagged = [0]

    def count(block: Any) -> None:
        tagged[0] += sum(block.column("rows").to_pylist()) if block.num_rows else 0

    bar = Progress(desc="data run: tag", unit="docs", disable=not progress)
    with watch(
        bar, lambda: (tagged[0], parts.records_to_read(out, stems, skip, config.shard_rows))
    ):
        run(dataset, config.ray.timeout_s, count)
    workers.raise_refusal(out)  # a map actor's, when no block reached it


EXECUTOR_WAIT_S = 0.5
"""How long Ray Data's streaming executor waits for its running tasks before each scheduling
step (Ray's default: 0.1 s). Its `ray.wait` asks for every running task, so it returns early only
when all are done: the driver ran a full step (usage, backpressure, dispatch, stats) ten times a
second whatever happened, ~1.5-3 CPU-s of a 2-core run. Every stage actor holds a second task
queued (Ray Data's default), so a later step idles none; a dataset's end is seen up to 0.5 s
later."""


MERGE_CPUS = 0.5
"""CPUs one merge task reserves (the stream is done when they run)."""


def merge(
    config: PipelineConfig,
    stages: list[Stage],
    out: OutPath,
    stems: list[str],
    done: set[str],
    merged: ledger.Merged,
    global_digest: str,
) -> None:
    """Merge every unfinished part of the inputs `stems` into its shard (workers.merge_parts);
    `merged` folds each part's record and costs as they arrive."""
    import ray

    shards = [
        shard for shard in parts.part_rows(out, stems, config.shard_rows) if shard not in done
    ]
    writer = {
        "out": out,
        "stages": [s.name for s in stages],
        "fields": [field for s in stages for field in s.columns],
        "drop": config.select.drop,
        "rejects_mode": config.rejects.mode,
        "sample_per_reason": config.rejects.sample_per_reason,
        "level": config.compression_level,
        "global_digest": global_digest,
    }
    with _original_errors():
        dataset = ray.data.from_items(
            [{"shard": s} for s in shards], override_num_blocks=max(1, len(shards))
        ).map_batches(
            workers.merge_parts,
            batch_size=1,
            batch_format="pyarrow",
            num_cpus=MERGE_CPUS,
            fn_kwargs=writer,
        )
    run(dataset, config.ray.timeout_s, merged.add)


@contextmanager
def session(
    config: PipelineConfig,
    address: str | None,
    out: OutPath,
    progress: bool,
    clock: throughput.RunClock,
) -> Iterator[None]:
    """Ray connected (or started) for the job's steps, Ray Data set up for them, the leftovers of
    a killed run's stream cleared; Ray shut down after (when this run started it)."""
    from pretrain import rayinit

    # Connect to a cluster (argument, config, RAY_ADDRESS) or start a local Ray; one this run
    # started gets Ray Data's per-driver actors started with it. Timed apart from the work.
    begin = time.perf_counter()
    started = rayinit.connect(
        address or config.ray.address,
        num_cpus=config.ray.num_cpus,
        object_store_mb=config.ray.object_store_mb,
    )
    if started:
        rayinit.warm_ray_data()
    clock.ray_start_s = time.perf_counter() - begin
    import ray.data
    from ray.data._internal.execution import streaming_executor_state

    begin = time.perf_counter()
    clock.cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    settings = patched(
        ray.data.DataContext.get_current(),
        # Our progress display is the job's; Ray Data's own bars only with -v (to the log).
        enable_progress_bars=progress and verbosity() >= VERBOSE,
        # Small blocks, so one big input file still spreads over every stage actor.
        target_max_block_size=config.ray.block_mb * 2**20,
    )
    # the stream and the merge are Ray Data jobs
    stepping = patched(streaming_executor_state, WAIT_FOR_TASK_COMPLETION_TIMEOUT_S=EXECUTOR_WAIT_S)
    try:
        with settings, stepping:
            remove_tree(throughput.cost_dir(out))  # a killed run's batch records
            remove_tree(out / parts.PARTS / parts.ROWS)
            remove_tree(out / parts.PARTS / parts.PROGRESS)
            clock.marker = parts.phase_path(out)
            yield
    finally:
        clock.ray_work_s = time.perf_counter() - begin
        rayinit.shutdown(started)


def run(dataset: Any, timeout_s: float | None, on_block: Callable[[Any], None]) -> None:
    """Run the dataset to completion, within `timeout_s` when one is set; `on_block` sees each
    output block as it arrives."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            for block in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
                on_block(block)
        except BaseException as exc:  # re-raised in the driver thread below
            errors.append(exc)

    thread = threading.Thread(target=target, name="pipeline-execute", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise PretrainError(
            f"ray.timeout_s = {timeout_s}: the job did not finish in time; raise "
            "it, or check the cluster (`ray status`) for missing CPUs"
        )
    if errors:
        raise_pretrain_cause(errors[0])  # one line, as the task raised it
        raise errors[0]
