"""Which shards go into which encoded prefix: per split family, consecutive shards packed into
prefixes of at least `min_documents` of that family's documents.

`train-<n:05d>` prefixes hold the documents whose `split` is not `eval`, `eval-<n:05d>` the others,
so a consumer that ignores our sidecars (Megatron-LM's `--data-path`) cannot train on eval
documents. Megatron's GPTDataset splits every prefix of a blend by documents (`98,1,1`): a prefix
of 2 documents leaves a split empty and the builder fails an assertion or loops forever.
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
    """One prefix to write: its name, its split family and its shards (path, sha256), in order."""

    name: str
    split: str
    shards: tuple[tuple[Path, str], ...]


def plan_prefixes(shards: dict[Path, str], min_documents: int) -> list[Prefix]:
    """The prefixes of `shards` ({path: sha256}, sorted); a short tail joins the prefix before it,
    a family with no document gets no prefix."""
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
            Prefix(f"{split}-{n:05d}", split, tuple((p, shards[p]) for p, _ in g))
            for n, g in enumerate(groups)
        ]
    return prefixes
