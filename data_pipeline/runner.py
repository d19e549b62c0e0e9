"""The data job, `pretrain data run`: preflight, plan the resume (docs/data.md#resume), run it on
Ray (data_pipeline.ray_job), then write ledger.json (conservation checked), README.md and, last,
manifest.json in the driver. Inputs and output must be reachable from every Ray node."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from data_pipeline import global_parts, ledger, parts, ray_job, throughput
from data_pipeline.config import PipelineConfig
from data_pipeline.fingerprint import (
    FINGERPRINT,
    check_output_target,
    input_artifacts,
    model_hashes,
    output_is_foreign,
    prepare_output,
    stage_artifacts,
)
from data_pipeline.inputs import Unit, check_output_apart, plan_inputs
from data_pipeline.readers import check_openable
from data_pipeline.stages.base import GlobalStage, Stage
from data_pipeline.stages.registry import (
    manifest_sections,
    required_stages,
    stage_class,
)
from pretrain import shards_layout as layout
from pretrain.artifacts import shards as shards_kind
from pretrain.artifacts.base import write_artifact
from pretrain.config import config_dict, parse_config
from pretrain.errors import ConfigError, PretrainError
from pretrain.locking import output_lock
from pretrain.progress import step, warn
from pretrain.storage import (
    OutPath,
    listed,
    lock_target,
    output_path,
    remove_tree,
    write_atomic,
    write_json,
)


@dataclass
class RunResult:
    """What a finished job produced."""

    output: OutPath
    ledger: dict[str, Any]
    manifest: dict[str, Any]
    shards: list[str] = field(default_factory=list)
    reused_parts: int = 0
    """Parts (shards and their rejects and part records) reused from an earlier run."""
    parts: int = 0
    reused_map_parts: dict[str, int] = field(default_factory=dict)
    """Global stage -> parts whose persisted map output this run reused (global_parts)."""

    def summary(self) -> str:
        led = self.ledger
        return (
            f"{led['documents_in']} docs in, {led['documents_kept']} kept, "
            f"{led['documents_dropped']} dropped (ledger balanced: "
            f"{led['conservation']['balanced']}), {len(self.shards)} shards "
            f"({self.reused_parts} of {self.parts} parts reused), "
            + "".join(  # after a resumed run with global stages
                f"{stage} map output reused for {count} of {self.parts} parts, "
                for stage, count in self.reused_map_parts.items()
                if count
            )
            + f"{len(led.get('skipped_files', []))} files skipped (ledger.json skipped_files) "
            + f"-> {self.output}"
            + throughput.summary(self.manifest.get("throughput"))
        )


def build_stages(config: PipelineConfig) -> list[Stage]:
    """The enabled stages in registry order; a missing enabled stage is a one-line error."""
    enabled = config.enabled_stages()
    for name, why in required_stages().items():
        if name not in enabled:
            raise ConfigError(f"stages.{name} must be present and enabled: {why}")
    stages = []
    for name in enabled:
        cls = stage_class(name)
        section = config.stages.get(name) or {}
        stage_config = parse_config(cls.Config, section, source=f"stages.{name}")
        budget = {"worker_memory_mb": config.ray.worker_memory_mb}
        stages.append(cls(stage_config, **(budget if issubclass(cls, GlobalStage) else {})))
    return stages


def preflight(
    config: PipelineConfig, skipped: list[dict[str, str]] | None = None
) -> tuple[list[Stage], list[Any]]:
    """Every check a run makes before it works (the real run and `--dry-run` both call this):
    stages, models, inputs and output. Returns the stages and the planned input files; files of
    directory inputs that are not read are appended to `skipped` with their reason."""
    out = output_path(config.output)
    check_output_target(out)  # first: a refused output gets no log (or anything else) of ours
    stages = build_stages(config)
    for stage in stages:
        stage.check()
    walked: dict[tuple[int, int], str] = {}
    inputs = plan_inputs(config.inputs, skipped, walked)
    check_output_apart(config.inputs, config.output, inputs, walked)
    if config.on_unreadable == "error":
        for item in inputs:
            check_openable(item, config.text_field)
    output_is_foreign(config, out, stages)
    return stages, inputs


def _collect(
    out: OutPath, stems: list[str], stages: list[Stage], merged: ledger.Merged
) -> tuple[dict[str, Any], list[str]]:
    """The ledger from every input's read record and every part's record, and the shard files. The
    part records this run's merge handed over are folded in `merged` already; only the parts reused
    from an earlier run are read (`parts.READ_AHEAD` at a time in an object store) and folded as
    read: the driver holds per-input counts, not part records. `merged.known` gets the digest of
    every file a part record lists, so the manifest reads no output file again to hash it."""
    read_docs, read_bytes, collisions, shards = 0, 0, 0, []
    paths = [parts.read_stats_path(out, stem) for stem in stems]
    for stem, path, data in zip(stems, paths, parts.read_bytes(out, paths), strict=True):
        if data is None:
            raise PretrainError(
                f"input {stem}: no read record in {out / parts.PARTS}; the job "
                "did not finish reading it; re-run the command"
            )
        merged.known[f"{parts.PARTS}/{path.name}"] = ledger.digest(data)
        stats = json.loads(data)
        read_docs, read_bytes = read_docs + stats["records"], read_bytes + stats["bytes"]
        collisions += stats.get("id_collisions", 0)
        shards += [f"{stem}-{part:05d}" for part in range(int(stats["parts"]))]
    if not merged.shards <= set(shards):
        merged.forget_records()  # a part of no input of this run's: read them all, as before
    todo = [shard for shard in shards if shard not in merged.shards]
    records = parts.read_bytes(out, (parts.part_record_path(out, shard) for shard in todo))
    for shard, data in zip(todo, records, strict=True):
        if data is None:
            raise PretrainError(
                f"shard {shard} was not written; re-run the command (finished shards are reused)"
            )
        merged.add_record(shard, data)
    led = ledger.aggregate((), [s.name for s in stages], read_docs, read_bytes, merged.fold)
    led["id_collisions"] = collisions
    return led, sorted(p.name for p in (out / layout.DATA_DIR).glob("*.parquet"))


@dataclass
class Published:
    """The merged parts of an unfinished run with a global stage, by the global digest their part
    record holds: global tags depend on every document, so a shard is kept only when this run's
    global stages get the map output it was merged from, else merged again."""

    out: OutPath
    digests: dict[str, str] = field(default_factory=dict)
    kept: set[str] = field(default_factory=set)
    digest: str = ""

    def add(self, shard: str, data: bytes) -> None:
        """Note a verified part record's digest (parts.finished_parts' `on_verified`)."""
        self.digests[shard] = json.loads(data).get(parts.GLOBAL_DIGEST, "")

    def keep(self, digest: str) -> set[str]:
        """The parts whose shard stays (its record holds `digest`); every other part's shard,
        rejects and part record are forgotten (read records and the persisted map output stay)."""
        self.digest = digest
        self.kept = {shard for shard, held in self.digests.items() if held == digest}
        out = self.out
        for sub in (layout.DATA_DIR, layout.REJECTS_DIR):
            if not self.kept:
                remove_tree(out / sub)
                continue
            for path in listed(out / sub, "*"):
                if layout.shard_name(path.name) not in self.kept:
                    path.unlink(missing_ok=True)
        for path in listed(out / parts.PARTS, "*.json"):
            record = path.name != FINGERPRINT and not path.name.endswith(".read.json")
            if record and path.stem not in self.kept:
                path.unlink(missing_ok=True)
        parts.ensure_dirs(out)
        return self.kept


@dataclass
class Work:
    """What this run computes: the inputs to read, the parts skipped at read time, and the
    inputs whose shards are (re)written; with a global stage, the parts already merged."""

    read: list[dict[str, str]]
    skip: set[str]
    merge: list[str]
    published: Published | None = None

    def __bool__(self) -> bool:
        return bool(self.read or self.merge)


def plan_work(
    config: PipelineConfig,
    stages: list[Stage],
    units: list[Unit],
    out: OutPath,
    on_verified: Callable[[str, bytes], None],
) -> tuple[Work, set[str]]:
    """What to compute, and the parts reused (`done`); `on_verified` gets the record bytes of every
    part the scan verified. With a global stage and work left, the merged parts are only candidates
    (`Published`) and `done` is empty until the global stages' map output is known."""
    _, globals_ = global_parts.plan(stages)
    published = Published(out)

    def verified(shard: str, data: bytes) -> None:
        published.add(shard, data)
        on_verified(shard, data)

    done = parts.finished_parts(out, verified if globals_ else on_verified)
    stems = [u.stem for u in units]
    records = dict(zip(stems, parts.read_records(out, stems), strict=True))
    unfinished = [u for u in units if not parts.record_done(records[u.stem], u.stem, done)]
    items = {u.stem: u.item() for u in units}
    if not unfinished or not globals_:
        todo = [items[f.stem] for f in unfinished]
        return Work(todo, done, [t["stem"] for t in todo]), done
    # Every part's global tags are computed again, from the first global stage's map output
    # where it is already persisted; the merged parts wait for the global digest.
    rows = parts.part_rows(out, list(items), config.shard_rows)
    skip = global_parts.reusable(out, globals_[0][0], rows)
    read = [items[u.stem] for u in units if not parts.record_done(records[u.stem], u.stem, skip)]
    return Work(read, skip, list(items), published), set()


def run_pipeline(
    config: PipelineConfig,
    *,
    ray_address: str | None = None,
    progress: bool = True,
) -> RunResult:
    """Run the data job described by `config`; returns the ledger and manifest it wrote."""
    with output_lock(lock_target(config.output)):
        skipped: list[dict[str, str]] = []
        stages, inputs = preflight(config, skipped)
        out = output_path(config.output)
        changed, units = prepare_output(config, out, stages, inputs)
        if changed:
            warn(
                f"[data run] {len(changed)} inputs changed since the last run into this output "
                f"(or left it); their parts are recomputed: {', '.join(changed[:5])}"
            )
        merged = ledger.Merged()  # what the resume scan and the merge read: not read back
        work, done = plan_work(config, stages, units, out, merged.add_record)
        todo = work.merge
        if progress:
            merged_parts = len(work.published.digests) if work.published else 0
            waiting = f", {merged_parts} more if the global stages' input is the same"
            waiting = waiting if merged_parts else ""
            step(
                f"[data run] {len(inputs)} input files in {len(units)} units of work, "
                f"{len(skipped)} skipped ({len(units) - len(todo)} units already done, "
                f"{len(done)} parts reused{waiting}); "
                f"stages: {', '.join(s.name for s in stages)}"
            )
        reused_map: dict[str, int] = {}
        clock = throughput.RunClock() if work else None
        if clock is not None:
            with ray_job.session(config, ray_address, out, progress, clock):
                if work.read:
                    with clock.phase("stream"):
                        ray_job.stream(config, stages, work.read, work.skip, out, progress)
                if work.published is not None:
                    rows = parts.part_rows(out, work.merge, config.shard_rows)
                    reused_map = global_parts.run_global_stages(
                        out,
                        stages,
                        rows,
                        config.ray.timeout_s,
                        work.published.keep,
                        clock.phase,
                    )
                    done = work.published.kept
                    if not merged.shards <= work.published.kept:
                        merged.forget_records()  # a part the scan verified was forgotten (Published.keep)
                global_digest = work.published.digest if work.published is not None else ""
                with clock.phase("merge"):
                    ray_job.merge(config, stages, out, work.merge, done, merged, global_digest)
        led, shards = _collect(out, [u.stem for u in units], stages, merged)
        led["skipped_files"] = skipped
        write_json(out / layout.LEDGER, led)
        write_atomic(out / layout.CARD, layout.dataset_card().encode())
        if not led["conservation"]["balanced"]:
            raise RuntimeError(
                f"ledger does not balance: {led['conservation']}"
            )  # a bug, not input
        fields = shards_kind.ShardsFields(
            stages=[s.describe() for s in stages],
            models=model_hashes(stages),
            sections=manifest_sections(stages),
            throughput=throughput.report(out, stages, clock, merged),
        )
        manifest = write_artifact(
            out,
            fields,
            config=config_dict(config),
            inputs=input_artifacts(inputs) + stage_artifacts(stages),
            counts={
                "documents_in": led["documents_in"],
                "documents_kept": led["documents_kept"],
                "documents_dropped": led["documents_dropped"],
                "shards": len(shards),
                "text_bytes_kept": led["text_bytes_kept"],
                "pii_redacted": led["pii_redacted"],
            },
            known=merged.known,
        )
        if not config.keep_global_parts:
            global_parts.remove_all(out)
        return RunResult(
            out,
            led,
            manifest,
            shards,
            reused_parts=len(done),
            parts=led["parts"],
            reused_map_parts=reused_map,
        )
