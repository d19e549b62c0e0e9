"""Which shards go into which encoded prefix (`<prefix>.bin` / `.idx` / `.docs.parquet`).

Training and held-out documents never share a prefix: `train-<n:05d>` prefixes hold the documents
whose `split` is not `eval`, `eval-<n:05d>` prefixes the `split == eval` ones, so a consumer that
ignores our sidecars (Megatron-LM's `--data-path`, a blend over the directory) cannot train on
eval documents by passing the training prefixes. A prefix is named by what it holds, numbered in
shard order.

Megatron's GPTDataset splits every prefix of a blend by documents (`split: "98,1,1"` gives each
prefix's last 1% to test): a prefix of 2 or 20 documents leaves a split empty, and the builder then
fails an assertion (zero-weight blend) or, with explicit weights, loops forever looking for tokens.
So, per split, consecutive shards (in their sorted order) are packed into prefixes of at least
`min_documents` of that split's documents, and a short tail joins the prefix before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

MIN_PREFIX_DOCUMENTS = 1000
"""Default: the 1% valid and test splits of "98,1,1" get about 10 documents of every prefix."""
SPLITS = ("train", "eval")
"""The prefix families, in manifest order; `eval` holds `split == eval`, `train` every other row."""


@dataclass(frozen=True)
class Prefix:
    name: str
    split: str
    shards: tuple[Path, ...]


def plan_prefixes(shards: list[Path], min_documents: int = MIN_PREFIX_DOCUMENTS) -> list[Prefix]:
    """Per split family, group `shards` (sorted) into prefixes of >= `min_documents` documents
    of that family where the total allows it (fewer is one prefix); a family with no document
    gets no prefix."""
    counts = {}  # how many of each shard's documents each family takes (its `split` column)
    for shard in shards:
        column = pq.read_table(shard, columns=["split"]).column("split")
        held_out = int(pc.sum(pc.equal(column, "eval")).as_py() or 0)
        counts[shard] = {"train": len(column) - held_out, "eval": held_out}
    prefixes: list[Prefix] = []
    for split in SPLITS:
        groups: list[list[tuple[Path, int]]] = []
        current: list[tuple[Path, int]] = []
        for shard in shards:
            if counts[shard][split] == 0:
                continue
            current.append((shard, counts[shard][split]))
            if sum(rows for _, rows in current) >= min_documents:
                groups.append(current)
                current = []
        if current and groups:
            groups[-1].extend(current)  # a short tail joins the prefix before it
        elif current:
            groups.append(current)
        prefixes += [
            Prefix(f"{split}-{n:05d}", split, tuple(p for p, _ in g)) for n, g in enumerate(groups)
        ]
    return prefixes
