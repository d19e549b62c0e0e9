"""How distributed dedup cuts its work so that every Ray task fits a per-worker memory budget.

- a map task (DedupStage.map_part, one input part of at most `shard_rows` documents) shingles
  and hashes its part in batches of at most HASH_BATCH_BYTES of text: its temporaries are one
  batch's (~MAP_FACTOR x the batch's text), whatever the part's size;
- every reduce task (band buckets, verification, star steps, labels, keep) sees one hash
  PARTITION: about documents / partitions documents with their signature and shingles, so the
  partition count, chosen here from the parts' documents and bytes and the budget
  (`ray.worker_memory_mb`), grows with the input until `REDUCE_FACTOR * partition bytes` fits.
  Below that cap partitions stay small anyway (TARGET_PARTITION_BYTES): a larger input gets
  more tasks, not larger ones.

The constants are measured (benchmarks/bench_dedup_memory.py) with a margin. Tags never depend
on the partitions (cluster ids are vertex hashes), so the count changes memory, not output.
"""

from __future__ import annotations

import math

from data_pipeline.dedup.config import DedupConfig
from pretrain.errors import ConfigError

WORKER_BASE_MB = 330
"""A Ray worker after its first dedup tasks: ~146 MB idle with the dedup code imported, plus what
its allocators keep and the object-store pages it maps (fitted: 325 MB, benchmarks/
bench_dedup_memory.py at 1x/4x/16x; workers are reused, so a worker's RSS is the sum of what each
kind of task left, not only the largest task)."""
MAP_FACTOR = 20.0
"""Peak bytes of a map task's hash batch per byte of its text (text, normalised copies, tokens,
shingles, 128 x 8-byte hash blocks, signatures): ~15 measured (HASH_BATCH_BYTES), 16.8 and 18.0
per slice byte in the bench_dedup_memory runs recorded in BENCHMARKS.md, so 20 keeps a margin."""
REDUCE_FACTOR = 12.0
"""Peak bytes of a reduce task per byte of its partition's document rows (concatenation, lookups,
the candidates carrying their shingles; fitted 11.4 on the same runs)."""
HASH_BATCH_BYTES = 1 << 20
"""Text shingled and hashed at once inside a map task (core.hash_batches; also at most
`batch_size` documents), so a map task's peak is its part's outputs plus one batch, not
MAP_FACTOR x the part (a 4.5 MB slice: 46.8 MB numpy peak as one 2,048-document batch, 16.8 MB
in 1 MB batches; CPU within 3% of one batch, 512 KB batches 11% slower)."""
TARGET_PARTITION_BYTES = 8 << 20
"""Below the budget's cap, a reduce partition holds about TARGET_PARTITION_BYTES of document
rows, so a larger input means more tasks, not larger workers (without it, an input below the cap
filled it: worker memory then grew with the input up to the budget; benchmarks/
bench_dedup_memory.py). Not smaller: every task costs Ray overhead outside the dedup code."""
MAX_TARGET_PARTITIONS = 16
"""The small partitions above stop here: past it partitions grow again up to the budget's cap
(every partition pair is one piece of each exchange step)."""
DEFAULT_WORKER_MEMORY_MB = 2048
"""Per-worker memory budget of the global stages when `ray.worker_memory_mb` is not set."""
SMALL_PARTITION_DOCS = 2500
"""Below this many documents per partition at one partition per CPU, a second partition per
CPU only adds tasks: a reduce step's fixed cost per task (scheduling, fetching its pieces) is
then most of its time, so small inputs get one partition per CPU, larger ones two (balance)."""
MAX_PARTITIONS = 65536
"""With the exchange through files (data_pipeline.dedup.exchange) the driver holds O(producers +
partitions) small values per step, so driver memory does not cap the partitions; the reads do: a
step of M producers and P partitions is M x P ranged reads (exchange's docstring). At 6 KB pages
and the default 2 GB budget the cap is near 2 billion pages (~12 TB of text); 40 TB in one job
needs ray.worker_memory_mb >= ~6,000 (or several jobs against the index)."""


MIN_WORKER_MEMORY_MB = WORKER_BASE_MB + math.ceil(HASH_BATCH_BYTES * MAP_FACTOR / 2**20)
"""The smallest budget that holds a worker and one map task's hash batch."""


class BudgetError(ConfigError):
    """The memory budget cannot hold even the smallest unit of work."""


def usable_bytes(worker_memory_mb: int) -> int:
    if worker_memory_mb < MIN_WORKER_MEMORY_MB:
        raise BudgetError(
            f"ray.worker_memory_mb={worker_memory_mb} leaves no room for dedup work after a "
            f"Ray worker's own ~{WORKER_BASE_MB} MB; set it to at least {MIN_WORKER_MEMORY_MB}"
        )
    return (worker_memory_mb - WORKER_BASE_MB) * 2**20


def doc_row_bytes(mean_doc_bytes: float, config: DedupConfig) -> float:
    """Signature (4 bytes x num_perm) + shingles (4 bytes per word: ~0.7 x text bytes, a word
    and its space being ~6 bytes; one per character for CJK is bounded the same way by UTF-8's
    3 bytes a character) + ids, vertex, quality, position (~100 bytes)."""
    return 4 * config.num_perm + 0.7 * mean_doc_bytes + 100


def choose_partitions(
    documents: int,
    input_bytes: int,
    worker_memory_mb: int,
    cpus: int,
    config: DedupConfig,
) -> tuple[int, float]:
    """(partitions, per-document row bytes): at least 2 x CPUs for parallelism (1 x CPUs for
    small inputs: SMALL_PARTITION_DOCS), enough that one partition's rows fit the budget, about
    TARGET_PARTITION_BYTES of rows each while that needs at most MAX_TARGET_PARTITIONS, never
    more than the documents (empty tasks only)."""
    usable = usable_bytes(worker_memory_mb)
    row = doc_row_bytes(input_bytes / max(1, documents), config)
    needed = math.ceil(REDUCE_FACTOR * row * documents / usable)
    target = min(MAX_TARGET_PARTITIONS, math.ceil(row * documents / TARGET_PARTITION_BYTES))
    parallel = min(2 * cpus, max(cpus, math.ceil(documents / SMALL_PARTITION_DOCS)))
    partitions = max(2, parallel, needed, target)
    if config.num_partitions is not None:
        partitions = max(config.num_partitions, needed)
    if needed > MAX_PARTITIONS:
        raise BudgetError(
            f"dedup of {documents} documents needs {needed} partitions to fit "
            f"ray.worker_memory_mb={worker_memory_mb}, more than one shuffle handles "
            f"({MAX_PARTITIONS}); raise the budget, or dedup in several jobs, each against the "
            "index of those before it (stages.dedup.index.against)"
        )
    return min(partitions, max(2, documents)), row
