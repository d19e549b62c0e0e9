"""The data job on Ray Data: read -> map stages (actors) -> global stages -> one select -> shards.

    inputs --read_files (tasks, streaming)--> raw batches (`_shard`, `_row` name each row's part)
           --MapStagesWorker (actor pool, fractional CPUs; the map stages before any global
             stage, then the first global stage's map side when it is row-wise:
             data_pipeline.piece_maps)--> pieces (written by the map actors)
    global --for each global stage (data_pipeline.global_parts): map each part (persisted per
             part) -> aggregate in the driver -> join each part, then the map stages after it
             --> the next global stage's map, or the job's pieces
    merge  --one task per shard: pieces in row order -> the select -> data/<stem>-<part>.parquet,
             rejects/<stem>-<part>.pq, .parts/<stem>-<part>.json (ledger fragment)
    driver: ledger.json (conservation checked), README.md (dataset card), manifest.json (last)
(the layout: pretrain.shards_layout)

Resume: parts finished by an earlier run with the same config, stage versions and models are
reused if their files still verify (their rows are skipped at read time), so a re-run after a crash
equals an uninterrupted run, byte for byte; an input whose file changed is read again
(data_pipeline.fingerprint). With a global stage enabled, an unfinished run writes every shard
again (its tags depend on every document), but each global stage's map side is persisted per
part and reused while it verifies, so only unmapped parts are read and mapped again (and a run
killed during an aggregation maps nothing again). Shards and rejects are written in
`.parts/scratch/` and renamed into place; each run clears the scratch directory a killed run left.
Inputs and the output must be reachable from every Ray node: local paths on one machine, shared
storage or object-store URIs on a cluster (`output: s3://bucket/prefix` is written through
pretrain.outstore: one PUT per object, so no partial object is visible under its final key).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from data_pipeline import (
    execute,
    global_parts,
    ledger,
    merge,
    parts,
    resume,
    throughput,
    throughput_report,
    workers,
)
from data_pipeline.config import PipelineConfig
from data_pipeline.fingerprint import model_hashes, output_is_foreign, prepare_output
from data_pipeline.inputs import (
    check_openable,
    check_output_apart,
    input_artifacts,
    plan_inputs,
)
from data_pipeline.readers import Fields
from data_pipeline.stages.base import GlobalStage, Stage
from data_pipeline.stages.registry import (
    manifest_sections,
    registry,
    required_stages,
    stage_class,
)
from pretrain import shards_layout as layout
from pretrain.artifacts import shards as shards_kind
from pretrain.config import config_dict, parse_config
from pretrain.errors import ConfigError, PretrainError
from pretrain.locking import writes_output
from pretrain.outstore import (
    OutPath,
    lock_target,
    output_path,
    remove_tree,
    write_atomic,
    write_json,
)
from pretrain.progress import VERBOSE, Progress, step, verbosity, warn, watch


@dataclass
class RunResult:
    """What a finished job produced."""

    output: OutPath
    ledger: dict[str, Any]
    manifest: dict[str, Any]
    shards: list[str] = field(default_factory=list)
    reused_parts: int = 0
    """Parts (shards and their rejects and ledger fragments) reused from an earlier run."""
    parts: int = 0
    ray_stats: str = ""
    """Ray Data's per-operator timing report (empty when every shard was reused)."""
    reused_map_parts: dict[str, int] = field(default_factory=dict)
    """Global stage -> parts whose persisted map output this run reused (global_parts)."""

    def summary(self) -> str:
        led = self.ledger
        return (
            f"{led['documents_in']} docs in, {led['documents_kept']} kept, "
            f"{led['documents_dropped']} dropped (ledger balanced: "
            f"{led['conservation']['balanced']}), {len(self.shards)} shards "
            f"({self.reused_parts} of {self.parts} parts reused), {self._map_reuse()}"
            f"{len(led.get('skipped_files', []))} files skipped (ledger.json skipped_files) "
            f"-> {self.output}" + throughput_report.summary(self.manifest.get("throughput"))
        )

    def _map_reuse(self) -> str:
        """`dedup map output reused for 3 of 4 parts, ` after a resumed run with global stages."""
        return "".join(
            f"{stage} map output reused for {count} of {self.parts} parts, "
            for stage, count in self.reused_map_parts.items()
            if count
        )


def build_stages(config: PipelineConfig) -> list[Stage]:
    """The enabled stages in registry order; a missing enabled stage is a one-line error."""
    for name, why in required_stages().items():
        section = config.stages.get(name)
        if section is None or section.get("enabled", True) is False:
            raise ConfigError(f"stages.{name} must be present and enabled: {why}")
    stages = []
    for name in registry():
        section = config.stages.get(name)
        if section is None or section.get("enabled", True) is False:
            continue
        cls = stage_class(name)
        stage_config = parse_config(cls.Config, section, source=f"stages.{name}")
        budget = {"worker_memory_mb": config.ray.worker_memory_mb}
        stages.append(cls(stage_config, **(budget if issubclass(cls, GlobalStage) else {})))
    return stages


def preflight(
    config: PipelineConfig, skipped: list[dict[str, str]] | None = None
) -> tuple[list[Stage], list[Any]]:
    """Every check a run makes before it works (the real run and `--dry-run` both call this):
    stage sections and types, model artifacts exist and verify, inputs exist and open, and the
    output is this job's or new. Returns the stages and the planned input files; files of
    directory inputs that are not read are appended to `skipped` with their reason."""
    stages = build_stages(config)
    for stage in stages:
        stage.check()
    inputs = plan_inputs(config.inputs, skipped)
    check_output_apart(config.inputs, config.output, inputs)
    if config.on_unreadable == "error":
        for item in inputs:
            check_openable(item, config.text_field)
    output_is_foreign(config, output_path(config.output), stages)
    return stages, inputs


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


def _build_dataset(
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
    head, globals_ = global_parts.plan(stages)
    first = globals_[0][0] if globals_ else None
    map_spec = first.spec() if first is not None and first.maps_in_stream() else None
    ds = ray.data.from_items(todo, override_num_blocks=len(todo)).map_batches(
        workers.read_files,
        batch_size=1,
        batch_format="pyarrow",
        **_read_resources(bool(head), cpus),
        fn_kwargs={
            "out": str(out),
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
            fn_kwargs={"out": str(out)},
        )
    return ds.map_batches(
        workers.MapStagesWorker,
        fn_constructor_kwargs={
            "specs": [s.spec() for s in head],
            "pieces_out": str(out),
            "cost_out": str(out),
            "batch_rows": config.batch_rows,
            "map_spec": map_spec,  # the first global stage's map, per piece (piece_maps)
        },
        batch_size=None,  # one block per call: blocks, not bundles of them, are dealt to actors
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=config.ray.workers or cpus),
        num_cpus=config.ray.cpus_per_worker,
    )


MERGE_CPUS = 0.5
"""CPUs one merge task reserves (the stream is done when they run)."""


def _merge(
    config: PipelineConfig,
    stages: list[Stage],
    out: OutPath,
    todo_stems: list[str],
    done: dict[str, set[int]],
) -> Any:
    """A dataset of one row per unfinished shard, mapped through merge.merge_shards."""
    import ray

    shards = []
    for stem in todo_stems:
        count = parts.load_json(parts.read_stats_path(out, stem))["parts"]
        shards += [f"{stem}-{p:05d}" for p in range(count) if p not in done.get(stem, set())]
    writer = {
        "out": str(out),
        "stages": [s.name for s in stages],
        "fields": [field for s in stages for field in s.columns],
        "drop": config.select.drop,
        "rejects_mode": config.rejects.mode,
        "sample_per_reason": config.rejects.sample_per_reason,
        "level": config.compression_level,
    }
    return ray.data.from_items(
        [{"shard": s} for s in shards], override_num_blocks=max(1, len(shards))
    ).map_batches(
        merge.merge_shards,
        batch_size=1,
        batch_format="pyarrow",
        num_cpus=MERGE_CPUS,
        fn_kwargs=writer,
    )


def _collect(
    config: PipelineConfig, out: OutPath, stems: list[str], stages: list[Stage]
) -> tuple[dict[str, Any], list[str]]:
    fragments, read_docs, read_bytes, collisions = [], 0, 0, 0
    for stem in stems:
        stats_path = parts.read_stats_path(out, stem)
        if not stats_path.is_file():
            raise PretrainError(
                f"input {stem}: no read record in {out / parts.PARTS}; the job "
                "did not finish reading it; re-run the command"
            )
        stats = parts.load_json(stats_path)
        read_docs, read_bytes = read_docs + stats["records"], read_bytes + stats["bytes"]
        collisions += stats.get("id_collisions", 0)
        for part in range(stats["parts"]):
            path = parts.fragment_path(out, f"{stem}-{part:05d}")
            if not path.is_file():
                raise PretrainError(
                    f"shard {path.stem} was not written; re-run the command "
                    "(finished shards are reused)"
                )
            fragments.append(parts.load_json(path))
    led = ledger.aggregate(fragments, [s.name for s in stages], read_docs, read_bytes)
    led["id_collisions"] = collisions
    shards = sorted(p.name for p in (out / layout.DATA_DIR).glob("*.parquet"))
    return led, shards


def _run_ray(
    config: PipelineConfig,
    stages: list[Stage],
    work: resume.Work,
    out: OutPath,
    done: dict[str, set[int]],
    ray_address: str | None,
    progress: bool,
    clock: throughput.RunClock,
) -> tuple[str, dict[str, int]]:
    """Stream the inputs to read through the map stages into pieces, run the global stages over
    every part, then merge the pieces into shards."""
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
        throughput.clear(out)
        remove_tree(out / parts.PARTS / parts.PIECES)
        remove_tree(out / parts.PARTS / parts.PROGRESS)
        clock.marker = parts.phase_path(out)
        stems = [t["stem"] for t in work.read]
        bar = Progress(desc="data run: tag", unit="docs", disable=not progress)
        tagged = execute.Tally()
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
                dataset = _build_dataset(config, stages, work.read, out, work.skip)
                _, stream_stats = execute.run(dataset, config.ray.timeout_s, tagged.add)
        if work.globals:
            rows = global_parts.expected_rows(out, work.merge, config.shard_rows)
            reused = global_parts.run_global_stages(
                out, stages, rows, config.ray.timeout_s, clock.phase
            )
        with clock.phase("merge"):
            merge = _merge(config, stages, out, work.merge, done)
            _, merge_stats = execute.run(merge, config.ray.timeout_s)
    finally:
        context.enable_progress_bars, context.target_max_block_size = saved
        clock.ray_work_s = time.perf_counter() - begin
        rayinit.shutdown(started)
    return f"{stream_stats}\n{merge_stats}", reused


@writes_output(lambda config, **_: lock_target(config.output))
def run_pipeline(
    config: PipelineConfig,
    *,
    ray_address: str | None = None,
    progress: bool = True,
) -> RunResult:
    """Run the data job described by `config`; returns the ledger and manifest it wrote."""
    skipped: list[dict[str, str]] = []
    stages, inputs = preflight(config, skipped)
    out = output_path(config.output)
    changed = prepare_output(config, out, stages, inputs)
    if changed:
        warn(
            f"[data run] {len(changed)} inputs changed since the last run into this output "
            f"(or left it); their parts are recomputed: {', '.join(changed[:5])}"
        )
    work, done = resume.plan_work(config, stages, inputs, out)
    todo = work.merge
    reused = sum(len(v) for v in done.values())
    if progress:
        step(
            f"[data run] {len(inputs)} input files, {len(skipped)} skipped "
            f"({len(inputs) - len(todo)} already done, "
            f"{reused} parts reused); stages: {', '.join(s.name for s in stages)}"
        )
    ray_stats, reused_map = "", dict[str, int]()
    clock = throughput.RunClock() if work else None
    if clock is not None:
        ray_stats, reused_map = _run_ray(
            config, stages, work, out, done, ray_address, progress, clock
        )
    led, shards = _collect(config, out, [f.stem for f in inputs], stages)
    if clock is not None:
        throughput.save_global_costs(out, stages, led["documents_in"], led["bytes_in"])
    led["skipped_files"] = skipped
    write_json(out / layout.LEDGER, led)
    write_atomic(out / layout.CARD, layout.dataset_card().encode())
    if not led["conservation"]["balanced"]:
        raise RuntimeError(f"ledger does not balance: {led['conservation']}")  # a bug, not input
    fields = shards_kind.ShardsFields(
        format=shards_kind.FORMAT,
        stages=[s.describe() for s in stages],
        models=model_hashes(stages),
        sections=manifest_sections(stages),
        throughput=throughput_report.build(
            out,
            [f.stem for f in inputs],
            [s.name for s in stages],
            [s.name for s in stages if isinstance(s, GlobalStage)],
            {f"{stem}-{part:05d}" for stem, parts in done.items() for part in parts},
            clock,
        ),
    )
    manifest = shards_kind.write(
        out,
        fields,
        config=config_dict(config),
        inputs=input_artifacts(inputs),
        counts={
            "documents_in": led["documents_in"],
            "documents_kept": led["documents_kept"],
            "documents_dropped": led["documents_dropped"],
            "shards": len(shards),
            "text_bytes_kept": led["text_bytes_kept"],
        },
    )
    if not config.keep_global_parts:
        global_parts.remove_all(out)
    return RunResult(
        out,
        led,
        manifest,
        shards,
        reused_parts=reused,
        parts=led["parts"],
        ray_stats=ray_stats,
        reused_map_parts=reused_map,
    )
