"""The rules and safety stages inside Ray Data's map_batches (shipped by pickle, set up lazily on
each worker), on the shared local Ray instance: same output as in-process."""

from __future__ import annotations

import pyarrow as pa
import pytest

from data_pipeline.stages.registry import schema_for
from data_pipeline.stages.rules import RulesStage
from data_pipeline.stages.safety import SafetyConfig, SafetyStage
from pretrain.schema import BASE_FIELDS
from tests.data_pipeline.test_rules import CHINESE, PROSE, PYTHON

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


def make_table() -> pa.Table:
    texts = [PROSE, CHINESE, PYTHON, "Mail li@example.cn, call 13800138000.", "", PROSE[:200]] * 4
    n = len(texts)
    columns = {
        "id": [f"d{i:03d}" for i in range(n)],
        "text": texts,
        "url": [None] * n,
        "source": ["test"] * n,
        "meta": [None] * n,
        "split": ["train"] * n,
    }
    return pa.Table.from_pydict(columns, schema=pa.schema(BASE_FIELDS))


def test_stages_in_ray_map_batches_match_in_process(ray_local):
    import ray.data

    table = make_table()
    rules, safety = RulesStage(), SafetyStage(SafetyConfig(url_blocklist=False))

    def both(batch: pa.Table) -> pa.Table:
        return safety(rules(batch))

    dataset = ray.data.from_arrow(table).repartition(3)
    mapped = dataset.map_batches(both, batch_format="pyarrow", batch_size=5)
    out = pa.concat_tables(ray_local.get(mapped.to_arrow_refs())).sort_by("id")
    expected = both(table).sort_by("id")
    declared = schema_for(["rules", "safety"])  # base columns, then each stage's declared ones
    assert (out.schema.names, out.schema.types) == (declared.names, declared.types)
    assert out.equals(expected)
    assert "<PHONE>" in out.column("text")[3].as_py()
