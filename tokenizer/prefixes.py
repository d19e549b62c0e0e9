"""Which shards go into which encoded prefix (`<prefix>.bin` / `.idx` / `.docs.parquet`).

Megatron's GPTDataset splits every prefix of a blend by documents (`split: "98,1,1"` gives each
prefix's last 1% to test): a prefix of 2 or 20 documents leaves a split empty, and the builder then
fails an assertion (zero-weight blend) or, with explicit weights, loops forever looking for tokens.
So consecutive shards (in their sorted order) are packed into prefixes of at least
`min_documents` documents, and a short tail joins the prefix before it. A prefix is named after
its first shard; with shards that large already, every shard is its own prefix, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

MIN_PREFIX_DOCUMENTS = 1000
"""Default: the 1% valid and test splits of "98,1,1" get about 10 documents of every prefix."""


@dataclass(frozen=True)
class Prefix:
    name: str
    shards: tuple[Path, ...]
    documents: int


def plan_prefixes(shards: list[Path], min_documents: int = MIN_PREFIX_DOCUMENTS) -> list[Prefix]:
    """Group `shards` (sorted) into prefixes of >= `min_documents` rows each where the total
    allows it (a corpus smaller than that is one prefix). Row counts come from Parquet footers."""
    groups: list[list[tuple[Path, int]]] = []
    current: list[tuple[Path, int]] = []
    for shard in shards:
        current.append((shard, pq.ParquetFile(shard).metadata.num_rows))
        if sum(rows for _, rows in current) >= min_documents:
            groups.append(current)
            current = []
    if current and groups:
        groups[-1].extend(current)  # a short tail joins the prefix before it
    elif current:
        groups.append(current)
    return [
        Prefix(g[0][0].stem, tuple(p for p, _ in g), sum(rows for _, rows in g)) for g in groups
    ]
