"""KenLM perplexity with CCNet head / middle / tail buckets (a global stage).

`map_part` scores each document with its language's model from the `kenlm-model` artifact
(10^(-sum log10 p / tokens), each line's </s> counted; no model or no text: null, bucket `none`)
and sketches the scores per language; `aggregate` merges the sketches into cutoffs at
`percentiles` (CCNet: 30 / 60), recorded as `sections.perplexity.ppl_cutoffs`; `join_part`
buckets: <= low `head`, <= high `middle`, above `tail`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field, field_validator

from data_pipeline.dedup.budget import BudgetError
from data_pipeline.normalization import NORMALIZATION, document_perplexity
from data_pipeline.stages.base import (
    GlobalStage,
    MapOutput,
    StageConfig,
    StageSection,
)
from pretrain.artifacts import model as model_kind
from pretrain.errors import ArtifactError, ConfigError, SchemaError

WORKER_BASE_MB = 300
"""A Ray worker scoring one part, without its models: an idle worker (~146 MB,
benchmarks/bench_dedup_memory.py) plus one part of the runner's shard_rows=5,000 documents of
~2.7 KB scored and sketched (118 MB, benchmarks/bench_perplexity_memory.py; the same at 4x and
16x the input: a worker holds one part at a time)."""
MODEL_RESIDENT_FACTOR = 1.0
"""Resident bytes of a loaded kenlm.Model per byte of its ARPA file (measured 0.95 on a 4 MB
order-5 model: same benchmark)."""
_LOADED: dict[tuple[str, str], Any] = {}
"""(ARPA path, sha256) -> kenlm.Model, per worker process: each model loads once per worker."""


class LogHistogramSketch:
    """A mergeable quantile sketch: per key (language), a fixed-bin histogram of log10(value).

    1,000 bins per decade over 10^0 .. 10^8 by default: a bin is 0.23% wide, so a quantile is
    exact to within 0.23% of its value. Partial sketches merge by adding counts, so the result is
    the same for any partitioning, worker count or merge order (unlike t-digest or KLL, whose
    answers depend on arrival order); memory is keys x bins (64 KB per language), whatever the
    corpus size."""

    def __init__(
        self, bins_per_decade: int = 1000, low_decade: int = 0, high_decade: int = 8
    ) -> None:
        self.bins_per_decade = bins_per_decade
        self.low = low_decade
        self.num_bins = (high_decade - low_decade) * bins_per_decade
        self.counts: dict[str, np.ndarray] = {}

    def add(self, key: str, values: np.ndarray) -> None:
        """Count `values` (values outside the range go to the end bins; non-finite ones nowhere)."""
        values = np.asarray(values, dtype=np.float64)
        values = values[np.isfinite(values)]
        if not len(values):
            return
        logs = np.log10(np.maximum(values, 1e-300))
        index = np.floor((logs - self.low) * self.bins_per_decade).astype(np.int64)
        counts = np.bincount(np.clip(index, 0, self.num_bins - 1), minlength=self.num_bins)
        self.add_counts(key, np.flatnonzero(counts), counts[counts > 0])

    def add_counts(self, key: str, bins: np.ndarray, counts: np.ndarray) -> None:
        """Add sparse (bin, count) pairs."""
        target = self.counts.setdefault(key, np.zeros(self.num_bins, dtype=np.int64))
        np.add.at(target, np.asarray(bins, dtype=np.int64), np.asarray(counts, dtype=np.int64))

    def table(self) -> pa.Table:
        """(lang, bin, count) of every non-empty bin: a part's persisted sketch."""
        rows = [
            (key, int(b), int(counts[b]))
            for key, counts in sorted(self.counts.items())
            for b in np.flatnonzero(counts)
        ]
        return pa.table(
            {
                "lang": pa.array([r[0] for r in rows], type=pa.string()),
                "bin": pa.array([r[1] for r in rows], type=pa.int64()),
                "count": pa.array([r[2] for r in rows], type=pa.int64()),
            }
        )

    def add_table(self, table: pa.Table) -> None:
        """Merge a `table()` of another sketch into this one."""
        for lang in sorted(set(table.column("lang").to_pylist())):
            rows = table.filter(pc.equal(table.column("lang"), lang))
            self.add_counts(lang, rows.column("bin").to_numpy(), rows.column("count").to_numpy())

    def total(self, key: str) -> int:
        return int(self.counts[key].sum()) if key in self.counts else 0

    def quantile(self, key: str, q: float) -> float | None:
        """Value at quantile q in [0, 1], interpolated geometrically inside its bin."""
        counts = self.counts.get(key)
        if counts is None or not counts.sum():
            return None
        cumulative = np.cumsum(counts)
        rank = q * cumulative[-1]
        index = min(int(np.searchsorted(cumulative, rank, side="left")), self.num_bins - 1)
        before = cumulative[index - 1] if index else 0
        inside = (rank - before) / counts[index] if counts[index] else 0.0
        log_value = self.low + (index + min(max(inside, 0.0), 1.0)) / self.bins_per_decade
        return float(10**log_value)


class PerplexityConfig(StageConfig):
    model: str | None = None
    """A `kenlm-model` artifact directory (built by `pretrain data train-lm`)."""
    percentiles: tuple[float, float] = (30.0, 60.0)
    """Per-language cutoffs between head / middle and middle / tail (CCNet: 30, 60)."""
    max_chars: int = Field(200_000, ge=1000)
    """Score at most this many characters of a document (bounds time on huge documents)."""
    bins_per_decade: int = Field(1000, ge=10, le=100_000)
    """Sketch resolution: quantiles are exact to within 10^(1/bins) - 1 (0.23% at 1000)."""
    cutoffs: dict[str, tuple[float, float]] = {}
    """Fixed {lang: [low, high]} perplexity cutoffs, e.g. the `sections.perplexity.ppl_cutoffs` of
    an earlier run's manifest, so a new crawl batch is bucketed like the reference corpus (CCNet
    fixes them once); languages not listed are estimated from this corpus."""

    @field_validator("cutoffs")
    @classmethod
    def _ordered_cutoffs(
        cls, value: dict[str, tuple[float, float]]
    ) -> dict[str, tuple[float, float]]:
        for lang, (low, high) in value.items():
            if not 0 < low <= high:
                raise ValueError(f"cutoffs.{lang}: need 0 < low <= high, got [{low}, {high}]")
        return value

    @field_validator("percentiles")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0 < value[0] < value[1] < 100:
            raise ValueError("need 0 < first < second < 100, e.g. [30, 60]")
        return value


class PerplexitySection(StageSection):
    """The stage's section of the shards manifest (`sections.perplexity`)."""

    ppl_cutoffs: dict[str, list[float]] = {}
    """Per language, the [low, high] cutoffs this run bucketed with (estimated or fixed)."""


class PerplexityStage(GlobalStage):
    """Tags `perplexity` (float, null when not scored) and `ppl_bucket` (head|middle|tail|none)."""

    name = "perplexity"
    order = 70
    columns = (
        pa.field("perplexity", pa.float32()),
        pa.field("ppl_bucket", pa.string()),  # head | middle | tail | none (no model for the lang)
    )
    tags = ("perplexity", "ppl_bucket")
    Section = PerplexitySection
    Config = PerplexityConfig
    config: PerplexityConfig
    join_reads = ("perplexity",)

    def __init__(self, config: StageConfig | None = None, **context: Any) -> None:
        super().__init__(config, **context)
        self.cutoffs: dict[str, list[float]] = {}
        self.counts: dict[str, int] = {}
        self._info: dict[str, Any] | None = None

    def model_info(self) -> tuple[Path, dict[str, Any]]:
        """The `kenlm-model` artifact and its model.json (verified once per stage object)."""
        model = self.config.model
        if not model:
            raise ConfigError(
                "stages.perplexity.model is not set; build KenLM models with "
                "`pretrain data train-lm configs/lm.yaml` and set its output "
                "directory"
            )
        if not Path(model).exists():
            raise ArtifactError(
                f"stages.perplexity: KenLM artifact {model!r} does not exist; build it "
                "with `pretrain data train-lm configs/lm.yaml` (set `out` to this path) or fix "
                "the path"
            )
        if self._info is None:
            self._info = model_kind.open(model, model_kind.KENLM_KIND).info
        return Path(model), self._info

    def check(self) -> None:
        need = self.worker_memory_mb()  # refuses missing models first
        budget = self.context.get("worker_memory_mb")
        if budget is not None and need > budget:
            raise BudgetError(
                f"stages.perplexity: its KenLM models need ~{need:.0f} MB per worker, more than "
                f"ray.worker_memory_mb={budget}; raise the budget to at least {need:.0f} or "
                "prune the models (`pretrain data train-lm` with prune_singletons_from)"
            )

    def worker_memory_mb(self) -> float:
        """What one scoring worker needs: its base plus every model it loads. Neither grows with
        the corpus: a worker holds one part at a time, and the driver's aggregate is the merged
        sketch (languages x bins, bounded by `bins_per_decade`)."""
        directory, info = self.model_info()
        arpa = sum((directory / e["file"]).stat().st_size for e in info["languages"].values())
        return WORKER_BASE_MB + MODEL_RESIDENT_FACTOR * arpa / 2**20

    def models(self) -> dict[str, Path]:
        return {"model": Path(self.config.model)} if self.config.model else {}

    def manifest_section(self) -> PerplexitySection:
        return PerplexitySection(ppl_cutoffs=self.cutoffs)

    def setup(self) -> None:
        import kenlm

        directory, info = self.model_info()
        scheme = info.get("normalization", {}).get("scheme")
        if scheme != NORMALIZATION["scheme"]:
            raise ArtifactError(
                f"{directory} was trained with text scheme {scheme!r}, this "
                f"code scores with {NORMALIZATION['scheme']!r}; retrain it"
            )
        self._models = {}
        for lang, entry in info["languages"].items():
            key = (str((directory / entry["file"]).resolve()), entry["sha256"])
            if key not in _LOADED:
                _LOADED[key] = kenlm.Model(key[0])
            self._models[lang] = _LOADED[key]

    # --- map: score ---------------------------------------------------------------------------
    def score(self, table: pa.Table) -> pa.Table:
        """`table` with the `perplexity` column appended (null where not scored)."""
        if "lang" not in table.column_names:
            raise SchemaError(
                "the perplexity stage needs the `lang` column; enable the langid stage before it"
            )
        if getattr(self, "_models", None) is None:
            self.setup()
        limit = self.config.max_chars
        values: list[float | None] = []
        for text, lang in zip(
            table.column("text").to_pylist(), table.column("lang").to_pylist(), strict=True
        ):
            model = self._models.get(lang)
            scored = document_perplexity(model, text[:limit]) if model and text else None
            values.append(float(10 ** (-scored[0] / scored[1])) if scored else None)
        return table.append_column(
            pa.field("perplexity", pa.float32()), pa.array(values, type=pa.float32())
        )

    # --- aggregate ----------------------------------------------------------------------------
    def new_sketch(self) -> LogHistogramSketch:
        return LogHistogramSketch(bins_per_decade=self.config.bins_per_decade)

    def sketch_of(self, table: pa.Table) -> LogHistogramSketch:
        """Per-language histogram of the perplexities in one scored table."""
        sketch = self.new_sketch()
        values = table.column("perplexity").to_numpy(zero_copy_only=False).astype(np.float64)
        langs = np.asarray(table.column("lang").to_pylist(), dtype=object)
        for lang in sorted({x for x in langs[~np.isnan(values)] if x is not None}):
            sketch.add(lang, values[(langs == lang) & ~np.isnan(values)])
        return sketch

    def set_cutoffs(self, sketch: LogHistogramSketch) -> dict[str, list[float]]:
        low, high = self.config.percentiles
        self.cutoffs = {
            lang: [
                round(sketch.quantile(lang, low / 100), 4),
                round(sketch.quantile(lang, high / 100), 4),
            ]
            for lang in sorted(sketch.counts)
        }
        for lang, fixed in self.config.cutoffs.items():
            self.cutoffs[lang] = [float(fixed[0]), float(fixed[1])]
        self.counts = {lang: sketch.total(lang) for lang in sorted(sketch.counts)}
        return self.cutoffs

    # --- join back ----------------------------------------------------------------------------
    def bucket(self, table: pa.Table, cutoffs: dict[str, list[float]]) -> pa.Table:
        """Append `ppl_bucket` from the cutoffs (head <= p_low < middle <= p_high < tail)."""
        buckets = []
        for value, lang in zip(
            table.column("perplexity").to_pylist(), table.column("lang").to_pylist(), strict=True
        ):
            limits = cutoffs.get(lang)
            if value is None or limits is None:
                buckets.append("none")
            else:
                buckets.append(
                    "head" if value <= limits[0] else "middle" if value <= limits[1] else "tail"
                )
        return table.append_column(
            pa.field("ppl_bucket", pa.string()), pa.array(buckets, type=pa.string())
        )

    # --- the runner's parts: map (persisted per part) -> aggregate -> join -------------------
    def map_part(self, rows: pa.Table) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        scored = self.score(rows)
        return {
            "perplexity": scored.select(["perplexity"]),
            "sketch": self.sketch_of(scored).table(),
        }, {}

    def aggregate(self, parts: Sequence[MapOutput]) -> list[tuple[Any, ...]]:
        sketch = self.new_sketch()
        for part in parts:
            sketch.add_table(pq.read_table(part.files["sketch"]))
        cutoffs = self.set_cutoffs(sketch)
        return [(cutoffs,)] * len(parts)

    def join_part(
        self, rows: pa.Table, outputs: dict[str, pa.Table], index: int, *args: Any
    ) -> pa.Table:
        (cutoffs,) = args
        column = outputs["perplexity"].column("perplexity")
        scored = rows.append_column(pa.field("perplexity", pa.float32()), column)
        return self.bucket(scored, cutoffs)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "scored_documents": self.counts}
