"""The dedup memory budget: partitions and slices chosen from the input size, never the output."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.dedup import budget
from data_pipeline.dedup.config import DedupConfig
from pretrain.config import parse_config
from pretrain.errors import ConfigError
from tests.data_pipeline.test_dedup import tag


def _partition_bytes(documents: int, input_bytes: int, memory_mb: int) -> float:
    partitions, row = budget.choose_partitions(documents, input_bytes, memory_mb, 2, DedupConfig())
    return budget.REDUCE_FACTOR * row * documents / partitions


@pytest.mark.parametrize("memory_mb", [budget.MIN_WORKER_MEMORY_MB, 512, 2048, 16384])
def test_partition_of_any_input_fits_the_budget(memory_mb: int) -> None:
    usable = budget.usable_bytes(memory_mb)
    previous = 0
    for documents in (1, 10, 10_000, 1_000_000, 10_000_000):
        input_bytes = documents * 6000  # web pages of ~6 KB
        row = budget.doc_row_bytes(6000, DedupConfig())
        if budget.REDUCE_FACTOR * row * documents / usable > budget.MAX_PARTITIONS:
            with pytest.raises(budget.BudgetError, match="raise the budget"):
                budget.choose_partitions(documents, input_bytes, memory_mb, 2, DedupConfig())
            continue
        partitions, _ = budget.choose_partitions(
            documents, input_bytes, memory_mb, 2, DedupConfig()
        )
        assert _partition_bytes(documents, input_bytes, memory_mb) <= usable
        assert partitions >= previous  # more input never means fewer partitions
        assert partitions <= max(2, documents)
        previous = partitions


def test_smaller_budget_more_partitions_and_default_parallelism() -> None:
    sizes = {
        mb: budget.choose_partitions(4_000_000, 24 * 10**9, mb, 8, DedupConfig())[0]
        for mb in (512, 1024, 2048, 16384)
    }
    assert sizes[512] > sizes[1024] > sizes[2048] > sizes[16384] >= 16  # 2 x CPUs at least
    assert budget.choose_partitions(40_000, 4 * 10**6, 2048, 8, DedupConfig())[0] == 16
    # a small input: one partition per CPU (a second one per CPU would only add task overhead)
    assert budget.choose_partitions(1000, 6 * 10**6, 2048, 8, DedupConfig())[0] == 8
    assert budget.choose_partitions(5000, 5 * 10**6, 2048, 2, DedupConfig())[0] == 2
    # an explicit num_partitions is honoured when it fits, raised when it does not
    two = DedupConfig(num_partitions=2)
    assert budget.choose_partitions(1000, 6 * 10**6, 2048, 8, two)[0] == 2
    assert budget.choose_partitions(4_000_000, 24 * 10**9, 2048, 8, two)[0] > 2


def test_budget_too_small_or_input_too_large_is_refused_with_the_remedy() -> None:
    with pytest.raises(budget.BudgetError, match="set it to at least"):
        budget.choose_partitions(10, 1000, 100, 2, DedupConfig())
    with pytest.raises(budget.BudgetError, match="raise the budget"):
        budget.choose_partitions(10**10, 6 * 10**13, 512, 2, DedupConfig())


def test_config_field_is_validated() -> None:
    config = {"inputs": ["x"], "output": "o"}
    assert PipelineConfig(**config).ray.worker_memory_mb == 2048
    with pytest.raises(ConfigError, match="worker_memory_mb"):
        parse_config(PipelineConfig, {**config, "ray": {"worker_memory_mb": 100}}, source="t")


def test_a_larger_input_below_the_cap_gets_more_partitions_not_larger_ones() -> None:
    """Worker memory is set by the unit of work, not by how much of the budget an input could
    fill: 1x -> 16x of an input the budget holds at once gives more partitions of the same small
    size (until MAX_TARGET_PARTITIONS; then they grow up to the budget's cap)."""
    config, doc_bytes = DedupConfig(), 2700  # the benchmark's documents
    counts = {}
    for scale in (1, 4, 16):
        documents = 1000 * scale
        partitions, row = budget.choose_partitions(
            documents, documents * doc_bytes, 2048, 2, config
        )
        assert row * documents / partitions <= budget.TARGET_PARTITION_BYTES
        counts[scale] = partitions
    assert counts[16] > counts[1]
    mid, _ = budget.choose_partitions(100_000, 100_000 * doc_bytes, 2048, 2, config)
    assert mid == budget.MAX_TARGET_PARTITIONS
    huge, row = budget.choose_partitions(8 * 10**6, 8 * 10**6 * doc_bytes, 2048, 2, config)
    needed = budget.REDUCE_FACTOR * row * 8 * 10**6 / budget.usable_bytes(2048)
    assert huge == int(needed) + 1 > budget.MAX_TARGET_PARTITIONS


def _corpus(count: int) -> pa.Table:
    rng = np.random.default_rng(3)
    vocab = np.array([f"w{i}" for i in range(5000)])
    bases = [" ".join(rng.choice(vocab, 45)) for _ in range(count // 4)]
    texts = []
    for i in range(count):
        words = bases[i % len(bases)].split()
        for pos in rng.choice(len(words), int(rng.integers(0, 4)), replace=False):
            words[pos] = f"edit{i}"
        texts.append(" ".join(words))
    ids = [f"doc-{i:06d}" for i in range(count)]
    quality = pa.array(rng.random(count), pa.float32())
    return pa.table({"id": ids, "text": texts, "quality_score": quality})


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_too_small_budget_gives_more_partitions_and_identical_output(ray_local, tmp_path) -> None:
    """The budget sets the partitions of the aggregate (each reduce task's memory), never the
    tags: at the smallest budget the same parts give more partitions and the same bytes."""
    table = _corpus(16_000)
    results = {}
    for memory_mb in (2048, budget.MIN_WORKER_MEMORY_MB):
        config = DedupConfig(num_partitions=2)
        results[memory_mb] = tag(
            tmp_path / str(memory_mb), table, config, parts=2, worker_memory_mb=memory_mb
        )
    (roomy, roomy_stage), (tight, tight_stage) = results.values()
    roomy_plan, tight_plan = roomy_stage.stats.extra["plan"], tight_stage.stats.extra["plan"]
    assert roomy_plan["partitions"] == 2  # num_partitions is honoured while it fits
    assert tight_plan["partitions"] > 2
    assert roomy.equals(tight)
    assert roomy_stage.stats.dropped == tight_stage.stats.dropped > 0


def test_exact_normalisation_folds_whitespace_as_the_plain_pattern_did() -> None:
    """The faster whitespace fold gives the same text (hence the same exact_hash) as `\\s+`."""
    import pyarrow.compute as pc

    from data_pipeline.dedup.minhash import normalize_exact

    texts = [
        "",
        " ",
        "a",
        " a ",
        "a b",
        "a  b",
        "a\tb",
        "a \t\n b",
        "a\r\nb\n",
        "\n\na\n\n",
        "a\vb",
        "a\fb",
        "a\u00a0b",
        "a\u3000b",
        "a\u2028b",
        "x \u00a0 y",
        "é  É\u0301",
        " leading",
        "trailing \n",
        "   ",
        "a " * 50 + "\n",
    ]
    array = pa.array(texts)
    plain = pc.utf8_lower(pc.utf8_normalize(array.cast(pa.large_string()), form="NFKC"))
    plain = pc.utf8_trim_whitespace(pc.replace_substring_regex(plain, r"\s+", " "))
    assert normalize_exact(array).to_pylist() == plain.to_pylist()
