"""How distributed dedup sizes its work so that every Ray task fits a per-worker memory budget.

A map task hashes its part HASH_BATCH_BYTES of text at a time, so its temporaries are one
batch's whatever the part's size. Every reduce task sees one hash partition (about documents /
partitions documents with their signature and shingles), so the partition count, chosen here
from the parts' documents and bytes and `ray.worker_memory_mb`, grows with the input until
REDUCE_FACTOR x a partition fits. The constants are measured (benchmarks/bench_dedup_memory.py)
with a margin. Tags never depend on the partitions, so the count changes memory, not output.
"""

from __future__ import annotations

import math

from data_pipeline.dedup.config import DedupConfig
from pretrain.errors import ConfigError

WORKER_BASE_MB = 330
"""A Ray worker after its first dedup tasks (fitted 325 MB at 1x/4x/16x: ~146 MB idle with the
code imported, plus what its allocators keep; workers are reused, so their RSS adds up)."""
MAP_FACTOR = 20.0
"""Peak bytes of a map task's hash batch per byte of its text (15-18 measured)."""
REDUCE_FACTOR = 12.0
"""Peak bytes of a reduce task per byte of its partition's document rows (fitted 11.4)."""
HASH_BATCH_BYTES = 1 << 20
"""Text hashed at once inside a map task (core.hash_batches; also at most `batch_size`
documents): a 4.5 MB slice peaks at 46.8 MB as one 2,048-document batch, 16.8 MB in 1 MB
batches, for CPU within 3% (512 KB batches: 11% slower)."""
TARGET_PARTITION_BYTES = 8 << 20
"""Below the budget's cap a partition holds about this much of document rows, so a larger
input means more tasks, not larger workers; not smaller: each task costs Ray overhead."""
MAX_TARGET_PARTITIONS = 16
"""The small partitions above stop here; past it partitions grow up to the budget's cap."""
DEFAULT_WORKER_MEMORY_MB = 2048
"""Per-worker memory budget of the global stages when `ray.worker_memory_mb` is not set."""
SMALL_PARTITION_DOCS = 2500
"""Below this many documents per partition at one per CPU, a second partition per CPU only adds
per-task overhead: small inputs get one partition per CPU, larger ones two (balance)."""
MAX_PARTITIONS = 65536
"""A step of M producers and P partitions is M x P ranged reads (data_pipeline.dedup.exchange):
at 6 KB pages and the default budget this caps one job near 2 billion pages (~12 TB of text)."""


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
