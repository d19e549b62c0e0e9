"""The dedup stage's config (pipeline YAML `stages.dedup`)."""

from __future__ import annotations

from functools import cached_property
from typing import Literal

import pyarrow as pa
from pydantic import Field, model_validator

from data_pipeline.dedup.minhash import MinHasher, lsh_params
from data_pipeline.stage_types import StageConfig
from pretrain.config import MAX_TIMEOUT_S, StrictModel

DEDUP_COLUMNS: tuple[pa.Field, ...] = (
    pa.field("exact_hash", pa.string()),
    pa.field("dup_cluster", pa.int64()),
    pa.field("dup_keep", pa.bool_()),
    pa.field("dup_cluster_size", pa.int32()),
    pa.field("dup_of", pa.string()),
    pa.field("dedup_reason", pa.string()),
)
"""The dedup stage's columns (DedupStage.columns), which its Ray tasks append."""
DUPLICATE, EARLIER_CORPUS = "duplicate", "earlier_corpus"
"""`dedup_reason` of a document not kept (null: kept): a copy of one kept in this corpus, or of
a document of the corpus `index.against` indexes (its id in `dup_of`). The ledger counts both
per reason, as it counts every stage's tags."""


class IndexConfig(StrictModel):
    """Incremental dedup: save this run's index, and/or dedup against an existing one."""

    save_to: str | None = None
    """Write a `dedup-index` artifact of this batch here (band keys, ids, signatures)."""
    against: str | None = None
    """A `dedup-index` artifact of an existing corpus: documents matching it get dup_keep=false."""


class DedupConfig(StageConfig):
    """Exact + MinHash near-duplicate dedup. Defaults: word 5-grams, 128 permutations, J >= 0.8."""

    exact: bool = True
    """Tag documents whose normalised text (NFKC, lower case, folded whitespace) is identical."""
    near: bool = True
    """Tag MinHash near-duplicates (estimated Jaccard of shingle sets >= threshold)."""
    threshold: float = Field(0.8, gt=0, le=1)
    """Candidate pairs are kept when their Jaccard similarity reaches this."""
    verify: Literal["exact", "signature"] = "exact"
    """How candidates are checked: `signature` trusts the MinHash estimate; `exact` computes the
    Jaccard of the shingle sets for pairs whose estimate is within noise of the threshold
    (estimates above threshold + 0.12 or below threshold - 0.15 are decided directly)."""
    num_perm: int = Field(128, ge=8, le=1024)
    seed: int = 1
    """Seed of the permutations; an index is only comparable with the same seed and num_perm."""
    word_ngram: int = Field(5, ge=1, le=32)
    char_ngram: int = Field(5, ge=1, le=32)
    """Shingle size for documents whose `lang` is Chinese, Japanese or Korean."""
    bands: int | None = Field(None, ge=1)
    rows: int | None = Field(None, ge=1)
    """(bands, rows) override; by default derived from `threshold` and the weights below."""
    false_positive_weight: float = Field(0.05, ge=0)
    false_negative_weight: float = Field(0.95, ge=0)
    """LSH errors are weighted towards recall (16 x 8 at 0.8: a pair at J = 0.8 collides with
    probability 0.95): candidates are verified, misses are lost."""
    num_partitions: int | None = Field(None, ge=1)
    """Hash partitions of the Ray shuffles. Default: 2 x the cluster's CPUs, or more when the
    input would not fit `ray.worker_memory_mb` per worker (data_pipeline.dedup.budget); a value
    set here is raised to what the budget needs."""
    batch_size: int = Field(2048, ge=1)
    """Documents shingled and hashed at once (bounds the memory of a map task)."""
    task_timeout_s: float = Field(3600, gt=0, le=MAX_TIMEOUT_S)
    """Give up (with an error, not a hang) when a Ray step waits longer than this."""
    index: IndexConfig = IndexConfig()

    @model_validator(mode="after")
    def _check_bands(self) -> DedupConfig:
        if (self.bands is None) != (self.rows is None):
            raise ValueError("set both bands and rows, or neither (derived from threshold)")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(
                f"bands * rows = {self.bands * self.rows} exceeds num_perm "
                f"{self.num_perm}; lower them or raise num_perm"
            )
        return self

    @cached_property
    def band_rows(self) -> tuple[int, int]:
        """(bands, rows) in use."""
        if self.bands is not None and self.rows is not None:
            return self.bands, self.rows
        return lsh_params(
            self.threshold, self.num_perm, self.false_positive_weight, self.false_negative_weight
        )

    def hasher(self) -> MinHasher:
        return MinHasher(self.num_perm, self.seed)
