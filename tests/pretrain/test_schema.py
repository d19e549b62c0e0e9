import pyarrow as pa

from pretrain.schema import conform, document_schema, split_for

LANGID = (
    pa.field("lang", pa.string()),
    pa.field("lang_score", pa.float32()),
    pa.field("langid_reason", pa.string()),
)


def _base_table(n: int = 3) -> pa.Table:
    ids = [f"doc-{i}" for i in range(n)]
    return pa.table(
        {
            "id": ids,
            "text": ["t"] * n,
            "url": [None] * n,
            "source": ["s"] * n,
            "meta": [None] * n,
            "split": [split_for(i) for i in ids],
        },
        schema=document_schema(),
    )


def test_split_is_stable_and_near_the_configured_fraction():
    ids = [f"doc-{i}" for i in range(200_000)]
    splits = [split_for(i) for i in ids]
    share = splits.count("eval") / len(splits)
    assert 0.004 < share < 0.006
    assert splits[:1000] == [split_for(i) for i in ids[:1000]]
    assert split_for("x", eval_fraction=1.0) == "eval"


def test_conform_reorders_and_casts():
    table = _base_table()
    shuffled = table.select(["text", "id", "split", "meta", "source", "url"])
    assert conform(shuffled, []).schema.equals(document_schema())
