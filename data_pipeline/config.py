"""The pipeline config (`pretrain data run CONFIG`): inputs, output, stages, the select, Ray.

`stages.<name>` sections are validated by that stage's own `Config` class when the job is built;
a stage runs when its section is present and `enabled` is not false, in the registry's order
(data_pipeline.stages.registry), from which the sections themselves are derived (a new stage,
built in or a plugin, adds none here).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, create_model, field_validator

from data_pipeline.dedup.budget import DEFAULT_WORKER_MEMORY_MB, MIN_WORKER_MEMORY_MB
from data_pipeline.readers import Fields
from data_pipeline.stages.registry import registry
from pretrain.config import MAX_TIMEOUT_S, StrictModel
from pretrain.schema import EVAL_FRACTION

__all__ = ["DEFAULT_WORKER_MEMORY_MB", "PipelineConfig", "StagesConfig"]


class RayConfig(StrictModel):
    """Where the job runs and what it asks Ray for (data_pipeline.runner, pretrain.rayinit)."""

    address: str | None = None
    """Existing cluster (`host:port`, `ray://...`, `auto`); `--ray-address` wins over this, and
    this over RAY_ADDRESS (which `ray job submit` sets for its driver); none of them: a local Ray
    on 127.0.0.1. A process that already called `ray.init()` (a test session) keeps that Ray."""
    num_cpus: int | None = Field(None, gt=0)
    """CPUs of a local Ray (default: the machine's cores); ignored on an existing cluster."""
    workers: int | None = Field(None, gt=0)
    """Stage actors of the map stages before the first global stage (default: the cluster's CPUs
    when the job starts). Map stages after a global stage run inside its join tasks instead, and
    the global stages and the merge run as tasks, not on these actors."""
    cpus_per_worker: float = Field(0.5, gt=0, le=64)
    """CPUs each stage actor reserves in Ray's scheduler (a reservation, not a cap: a busy actor
    uses a whole core). The read tasks beside the pool reserve none and run at most one per CPU
    (ray_job.stream), so no value here can starve them. The fractional default places the
    pool (one actor per CPU) on half the cluster's CPUs, so the actors Ray restarts after a node
    is lost still fit on the nodes left; actors that do not fit wait for a CPU."""
    object_store_mb: int | None = Field(None, gt=64)
    """Object store size of a local Ray (default: Ray's, 30% of memory); ignored on an existing
    cluster (set it with `ray start --object-store-memory`)."""
    worker_memory_mb: int = Field(DEFAULT_WORKER_MEMORY_MB, ge=MIN_WORKER_MEMORY_MB)
    """Memory budget of one Ray worker process, in MB. Global stages cut their work (dedup: its
    shuffle's partitions) from the input's size so that no task needs more; a larger
    corpus gives more partitions, not bigger workers. Output does not depend on it."""
    block_mb: int = Field(4, gt=0)
    """Ray Data block size cap (`DataContext.target_max_block_size`): small blocks let one large
    input spread over all actors (the pool is dealt one block per call)."""
    timeout_s: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S)
    """Give up (one-line error) when one phase takes longer than this: the stream, a global
    stage's map or join tasks, the merge (each phase has the whole limit; default: none). A
    global stage's aggregate has its own limit (dedup: `stages.dedup.task_timeout_s`)."""


class SelectConfig(StrictModel):
    drop: tuple[str, ...] = ("extract:*",)
    """Hard-reject clauses `stage:reason` (`*` = any reason of that stage). Rows matching any are
    dropped by the job's one select; every other tag is kept for mixtures to select on."""

    @field_validator("drop")
    @classmethod
    def _clauses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for clause in value:
            stage, sep, reason = clause.partition(":")
            if not sep or stage not in registry() or not reason:
                raise ValueError(
                    f"clause {clause!r} must be stage:reason with stage one of "
                    f"{', '.join(registry())} (reason may be *)"
                )
        return value


class RejectsConfig(StrictModel):
    mode: Literal["full", "sample", "none"] = "full"
    """Write every hard reject to _rejects/, a sample of each reason, or counts only (ledger)."""
    sample_per_reason: int = Field(20, ge=1)
    """Rows kept per reason and shard when mode is `sample`."""


class _Stages(StrictModel):
    def get(self, name: str) -> dict[str, Any] | None:
        """The section of stage `name` (None when absent)."""
        return getattr(self, name, None)


StagesConfig = create_model(
    "StagesConfig",
    __base__=_Stages,
    __doc__="One optional section per registered stage (the registry's order).",
    **{name: (dict[str, Any] | None, None) for name in registry()},  # type: ignore[call-overload]
)


class PipelineConfig(StrictModel):
    inputs: tuple[str, ...] = Field(min_length=1)
    """Files, directories (searched recursively) or URIs (s3://, gs://, hdfs://, file://)."""
    output: str = Field(min_length=1)
    """Artifact directory: data/, _rejects/, ledger.json, README.md, manifest.json
    (pretrain.shards_layout)."""
    stages: StagesConfig = StagesConfig.model_validate(  # type: ignore[valid-type]
        {"extract": {}, "langid": {}}
    )
    """Stage name -> its settings (each stage's Config class validates them); absent = not run."""
    select: SelectConfig = SelectConfig()
    rejects: RejectsConfig = RejectsConfig()
    ray: RayConfig = RayConfig()
    shard_rows: int = Field(5000, gt=0)
    """Input records per output shard (shards are `<input-stem>-<part:05d>.parquet`; a unit of
    packed small files is named after its first file)."""
    small_file_bytes: int = Field(64 << 10, ge=0)
    """Input files of at most this size (bytes on disk) are packed together, in input order,
    into units of work of up to `pack_bytes` each, when there are at least `pack_min_files` of
    them: a unit is read by one task and its records are cut into parts by `shard_rows` as one
    file's are, so 10,000 one-document files make a few parts, not 10,000. A unit's shards are
    named after its first file; its read record counts every file it holds."""
    pack_bytes: int = Field(64 << 20, gt=0)
    """Bytes on disk of the small files one unit of work packs (see `small_file_bytes`)."""
    pack_min_files: int = Field(64, ge=1)
    """Fewer small files than this are not packed: apart they cost little (a task and a part
    each) and keep shards named by their own file."""
    batch_rows: int = Field(256, gt=0)
    """Records per Arrow batch between stages: this, not corpus size, bounds worker memory. A
    reader or stage holds one batch: at most `batch_rows` records of at most extract's
    `max_input_bytes` each (256 x 5 MB = 1.3 GB at the defaults, before the copies Arrow and a
    stage make of it); lower it for a corpus of large documents. Parquet inputs are decoded
    `batch_rows` records at a time."""
    eval_fraction: float = Field(EVAL_FRACTION, ge=0, le=1)
    """Share of documents whose stable split tag is `eval`."""
    text_field: str = Field("text", min_length=1)
    """Field (JSON Lines) or column (Parquet) holding the text; `a.b` reaches into nested objects.
    Each of the four fields is dotted alike, and what it takes is not repeated in `meta`. The
    settings of Dolma, datatrove, FineWeb, the Pile, RedPajama v1 and v2: docs/data.md."""
    id_field: str = Field("id", min_length=1)
    """Field or column holding the record's id (a record without one is named by its line or
    row). Ids are namespaced by input: `<input stem>/<id>`."""
    url_field: str = Field("url", min_length=1)
    """Field holding the document's URL (the `url` column: the safety stage's URL blocklist)."""
    source_field: str = Field("source", min_length=1)
    """Field holding the document's source (default when absent: `<format>:<input file name>`)."""
    on_unreadable: Literal["error", "reject"] = "error"
    """A file that cannot be opened at all: stop with a one-line error, or count it as a reject."""
    overwrite: bool = False
    """Replace an output written with a different config (default: refuse; same config resumes)."""
    keep_global_parts: bool = True
    """Keep the global stages' persisted map side (`.parts/global/`, about a second copy of the
    tagged corpus) after a run that finished. false: deleted once the manifest is written (a
    killed run keeps it, for its resume); a later run that needs it maps every part again and
    ends byte-identical, only slower. `pretrain data clean DIR` deletes it afterwards."""
    compression_level: int = Field(3, ge=1, le=22)
    """zstd level of the shards."""

    def enabled_stages(self) -> list[str]:
        """The stages that run, in pipeline order: a section present and not `enabled: false`."""
        sections = {name: self.stages.get(name) for name in registry()}
        return [
            n for n, s in sections.items() if s is not None and s.get("enabled", True) is not False
        ]

    def fields(self) -> Fields:
        """Where the readers find each record's text, id, URL and source."""
        return Fields(self.text_field, self.id_field, self.url_field, self.source_field)

    def fingerprint_dict(self) -> dict[str, Any]:
        """What decides the shards' bytes (not where or how fast they are computed)."""
        data = self.model_dump(mode="json")
        for key in ("ray", "overwrite", "keep_global_parts", "output", "inputs"):
            data.pop(key)
        return data
