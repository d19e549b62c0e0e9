"""The dedup memory budget: partitions and slices chosen from the input size, never the output."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.dedup import budget
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.stages.dedup import DedupStage
from pretrain.config import parse_config
from pretrain.errors import ConfigError


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


def test_a_larger_input_below_the_caps_gets_more_tasks_not_larger_ones() -> None:
    """Worker memory is set by the unit of work, not by how much of the budget an input could
    fill: 1x -> 16x of an input the budget holds at once gives 16x the slices and partitions of
    the same small size (until the target counts are reached; then units grow to the caps)."""
    config = DedupConfig()
    doc_bytes = 2700  # the benchmark's documents
    plans = {}
    for scale in (1, 4, 16):
        blocks = [(250 * scale, 250 * scale * doc_bytes)] * 4
        plans[scale] = budget.plan(blocks, 2048, 2, config)
    for scale, plan in plans.items():
        documents = 1000 * scale
        assert plan.slice_bytes == budget.TARGET_SLICE_BYTES
        slice_rows = max(rows for _, _, rows in plan.slices)
        assert slice_rows * doc_bytes <= budget.TARGET_SLICE_BYTES * 1.01
        assert plan.doc_row_bytes * documents / plan.partitions <= budget.TARGET_PARTITION_BYTES
    assert len(plans[16].slices) >= 16_000 * doc_bytes / budget.TARGET_SLICE_BYTES
    assert plans[16].partitions > plans[1].partitions
    # past the target counts, units grow (a few more tasks than the targets, not 16x more) ...
    mid = budget.plan([(25_000, 25_000 * doc_bytes)] * 4, 2048, 2, config)
    assert mid.slice_bytes > budget.TARGET_SLICE_BYTES
    assert len(mid.slices) <= budget.MAX_TARGET_SLICES + 4
    assert mid.partitions == budget.MAX_TARGET_PARTITIONS
    # ... up to the budget's caps, where only the budget sets the counts
    huge = budget.plan([(10**6, 10**6 * doc_bytes)] * 8, 2048, 2, config)
    assert huge.slice_bytes == int(budget.usable_bytes(2048) / budget.MAP_FACTOR)
    needed = budget.REDUCE_FACTOR * huge.doc_row_bytes * 8 * 10**6 / budget.usable_bytes(2048)
    assert huge.partitions == int(needed) + 1 > budget.MAX_TARGET_PARTITIONS


def test_slices_cover_every_row_once_within_the_slice_size() -> None:
    blocks = [(0, 0), (1, 50 << 20), (1000, 10 << 20), (7, 100), (100_000, 64 << 20)]
    slices = budget.slice_blocks(blocks, 4 << 20)
    for index, (rows, size) in enumerate(blocks):
        mine = [(lo, n) for b, lo, n in slices if b == index]
        assert [lo for lo, _ in mine] == list(np.cumsum([0] + [n for _, n in mine])[:-1])
        assert sum(n for _, n in mine) == rows
        if rows > 1:
            assert max(n for _, n in mine) * size / rows <= (4 << 20) * 1.01
    assert [b for b, _, _ in slices] == sorted(b for b, _, _ in slices)  # input order kept
    assert (0, 0, 0) in slices  # an empty block still gets its (empty) join-back task


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
def test_too_small_budget_gives_more_partitions_and_identical_output(ray_local) -> None:
    table = _corpus(16_000)
    expected = DedupStage().apply_table(table)
    # a 4.0 MB block: one slice at 2 GB (4 MB slices), two at the floor's ~2.6 MB slices
    blocks = [table.slice(0, 14000), table.slice(14000)]
    results = {}
    for memory_mb in (2048, budget.MIN_WORKER_MEMORY_MB):
        stage = DedupStage(DedupConfig(num_partitions=2), worker_memory_mb=memory_mb)
        out = stage.apply(ray_local.data.from_arrow(blocks))
        results[memory_mb] = (pa.concat_tables(ray_local.get(out.to_arrow_refs())), stage)
    (roomy, roomy_stage), (tight, tight_stage) = results.values()
    roomy_plan, tight_plan = roomy_stage.stats.extra["plan"], tight_stage.stats.extra["plan"]
    assert roomy_plan["partitions"] == 2  # num_partitions is honoured while it fits
    assert tight_plan["partitions"] > 2 and tight_plan["slices"] > roomy_plan["slices"] >= 2
    assert roomy.equals(expected) and tight.equals(expected)
    assert roomy_stage.stats.dropped == tight_stage.stats.dropped > 0


def test_exact_normalisation_folds_whitespace_as_the_plain_pattern_did() -> None:
    """The faster whitespace fold gives the same text (hence the same exact_hash) as `\\s+`."""
    import pyarrow.compute as pc

    from data_pipeline.dedup.text import normalize_exact

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
