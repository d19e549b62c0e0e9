"""What the driver learns of each part from the merge itself, so it reads back nothing it was told.

The resume scan hands over the fragment of every part it verified the same way (a reused part's
fragment is read once, not once more at the end). A merge task writes a part's shard, rejects, ledger fragment and cost record, and returns the
fragment's and the cost record's bytes with its row (`merge.merge_shards`). The driver folds them
as the merge's output blocks arrive (`Merged.add`): the ledger's sums (ledger.Fold), the digest
of every file the fragment records and of the two records themselves (for the manifest, which
then reads none of them back), and each stage's cost totals (for the manifest's throughput
section). At the end only the parts this run did not merge (reused from an earlier run) are read
from the output: at 2M parts in an object store that is 2M fragment GETs and 2M cost GETs (plus
2M cost GETs by the manifest, which hashed them) not sent, about 3 h of serial requests at
moto's per-request cost (BENCHMARKS.md). What the driver keeps per part is its name (which parts
it was told of); the fragments and cost records are folded, never kept.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from data_pipeline import ledger, throughput
from data_pipeline.parts import PARTS
from pretrain.storage import OutPath


def digest(data: bytes) -> dict[str, Any]:
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


class Merged:
    """The fold of every part the merge of this run returned (see the module docstring)."""

    def __init__(self) -> None:
        self.fold = ledger.Fold()
        self.known: dict[str, dict[str, Any]] = {}
        """Digests for the manifest: the fragments' files, the fragments, the cost records."""
        self.shards: set[str] = set()
        """Parts whose fragment was folded here (not read back)."""
        self.costs: dict[str, dict[str, Any]] = {}
        """Stage -> cost totals over the parts whose cost record was folded here."""
        self.costed: set[str] = set()
        self.map_costs: dict[str, dict[str, Any]] = {}
        """Global stage -> the map cost of every part, folded from the map records the driver
        verified before the stage's aggregate (global_parts.run_global_stages)."""

    def add(self, block: Any) -> None:
        """Fold one output block of the merge (columns shard, fragment, cost)."""
        if not block.num_rows or "fragment" not in block.column_names:
            return
        for shard, fragment, cost in zip(
            block.column("shard").to_pylist(),
            block.column("fragment").to_pylist(),
            block.column("cost").to_pylist(),
            strict=True,
        ):
            self.add_fragment(shard, fragment.encode())
            if cost:  # none: the report reads what there is
                self.add_cost(shard, cost.encode())

    def forget_fragments(self) -> None:
        """Drop the fragments folded so far (the ledger then reads every one back)."""
        self.fold, self.shards = ledger.Fold(), set()

    def add_fragment(self, shard: str, data: bytes) -> None:
        if shard in self.shards:
            return  # each part once, whatever handed it over twice
        content = json.loads(data)
        self.known[f"{PARTS}/{shard}.json"] = digest(data)
        for name, record in content.get("files", {}).items():
            self.known[name] = {"bytes": record.get("bytes"), "sha256": record.get("sha256")}
        self.fold.add(content)
        self.shards.add(shard)

    def add_cost(self, shard: str, data: bytes) -> None:
        if shard in self.costed:
            return
        self.known[f"{PARTS}/{throughput.PART_COSTS}/{shard}.json"] = digest(data)
        for stage, cost in json.loads(data).items():
            throughput.add_cost(self.costs.setdefault(stage, {}), cost)
        self.costed.add(shard)

    def note_read(self, out: OutPath, path: OutPath, data: bytes) -> None:
        """The digest of a record the driver read itself (a reused part's), for the manifest."""
        rel = path.relative_to(out).as_posix()  # type: ignore[arg-type]  # same kind as `out`
        self.known[rel] = digest(data)
