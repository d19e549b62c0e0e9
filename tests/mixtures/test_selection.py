"""Tag selection over encoded sidecars matches an independent pandas filter, clause by clause."""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixtures.recipe import Component
from mixtures.selection import load_sidecars, select_components
from pretrain.errors import ConfigError

pytestmark = pytest.mark.timeout(60)


def _frame(encoded_dir: Path) -> pd.DataFrame:
    parts = []
    for prefix in range(3):
        side = pq.read_table(encoded_dir / f"part-{prefix:05d}.docs.parquet").to_pandas()
        parts.append(side.assign(prefix=prefix))
    return pd.concat(parts, ignore_index=True)


CASES = [
    (
        {"source": ["code/*", "books/shard1*"]},
        lambda f: f.source.map(
            lambda s: fnmatch.fnmatch(s, "code/*") or fnmatch.fnmatch(s, "books/shard1*")
        ),
    ),
    (
        {"ppl_bucket": ["head", "tail"], "perplexity": {"max": 500}},
        lambda f: f.ppl_bucket.isin(["head", "tail"]) & (f.perplexity <= 500),
    ),
    (
        {"url_blocked": False, "dup_keep": True, "unsafe_score": {"min": 0.05, "max": 0.15}},
        lambda f: ~f.url_blocked & f.dup_keep & f.unsafe_score.between(0.05, 0.15),
    ),
    (
        {"lang": "de", "quality_score": {"min": 0.25, "max": 0.75}},
        lambda f: (f.lang == "de") & f.quality_score.between(0.25, 0.75),
    ),
]


@pytest.mark.parametrize(("select", "expected"), CASES)
def test_selection_matches_independent_filter(encoded_dir: Path, select: dict, expected) -> None:
    frame = _frame(encoded_dir)
    sidecars = load_sidecars(encoded_dir, [f"part-{p:05d}" for p in range(3)])
    (docs,) = select_components([Component(name="c", select=select, weight=1.0)], sidecars)
    want = frame[expected(frame) & (frame.split != "eval")]
    got = set(zip(docs["prefix"].tolist(), docs["doc"].tolist(), strict=True))
    assert got == set(zip(want.prefix, want.doc_index, strict=True))
    assert got, "the case selects something"
    assert int(docs["tokens"].sum()) == int(want.num_tokens.sum())


def test_null_tags_never_match_and_all_null_tags_are_refused(
    tmp_path: Path, encoded_dir: Path
) -> None:
    copy = tmp_path / "enc"
    shutil.copytree(encoded_dir, copy)
    path = copy / "part-00000.docs.parquet"
    table = pq.read_table(path).to_pandas()
    table.loc[::2, "quality_score"] = np.nan
    table["perplexity"] = np.nan
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), path)
    sidecars = load_sidecars(copy, ["part-00000"])
    (docs,) = select_components(
        [Component(name="c", select={"quality_score": {"min": 0.0}}, weight=1.0)], sidecars
    )
    assert not set(docs["doc"].tolist()) & set(range(0, len(table), 2))
    with pytest.raises(ConfigError, match="perplexity: the tag is null in every document"):
        select_components(
            [Component(name="c", select={"perplexity": {"max": 10}}, weight=1.0)], sidecars
        )
