"""The first global stage's map of each part, started while the stream still runs.

The stream hands the driver one output block per batch of pieces written ({shard, rows}: each
block once, whichever worker made it, execute.Tally). A part is finished in the stream once its
rows counted that way reach its row count: `shard_rows` for every part but an input's last, whose
count is known from the input's read record (written when its read ends). Its map task
(global_parts.map_task) can then run beside the stream's actors: they reserve half a CPU each
(`ray.cpus_per_worker`), so one map task of a whole CPU fits beside them on a 2-CPU node, and in
the stream's last seconds, when fewer actors than cores have blocks, it uses a core that idled.
Before, every part's map waited for the whole stream to end and ran as its own phase, at most one
task per CPU (a 2-worker run: ~3 s at 10,000 pages, one core idle for about half of it).

The map output is the same whenever the task runs (it reads the part's finished pieces, in row
order, and persists them: global_parts.persist), so the shards are byte-identical. An early task
keeps the part's pieces (`keep_pieces`: nothing is deleted under the stream while it runs); the
driver removes them in the map phase after the stream, while the other parts' maps run, so the
map phase ends as before: every part mapped and persisted, no piece of the stream left. A part
whose count does not complete during the stream is mapped after it, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from data_pipeline import parts
from pretrain.storage import OutPath

RECHECK_S = 0.5
"""How often an input's missing read record is looked for again (one read each: a GET in an
object store)."""


class EarlyMaps:
    """Counts the stream's tagged rows per part and submits each finished part's map task."""

    def __init__(self, out: OutPath, shard_rows: int, submit: Callable[[str, int], Any]) -> None:
        self.out, self.shard_rows, self.submit = out, shard_rows, submit
        self.counts: dict[str, int] = {}
        self.waiting: set[str] = set()
        """Parts with rows counted whose map has not started."""
        self.records: dict[str, int] = {}
        """Input stem -> its records, once its read record exists."""
        self.looked: dict[str, float] = {}
        """Input stem -> when its read record was last looked for (at most every RECHECK_S)."""
        self.started: dict[str, Any] = {}
        """Part -> the ref of its map task."""

    def add(self, block: Any) -> None:
        """Count one output block of the stream; start the map of every part now finished (the
        last block of an input's last part may arrive before its read record is written: such a
        part waits for a later block, or for the map phase after the stream)."""
        if block.num_rows:
            shards = block.column("shard").to_pylist()
            for shard, rows in zip(shards, block.column("rows").to_pylist(), strict=True):
                self.counts[shard] = self.counts.get(shard, 0) + int(rows)
                if shard not in self.started:
                    self.waiting.add(shard)
        for shard in sorted(self.waiting):
            expected = self._expected(shard)
            if expected is not None and expected == self.counts[shard]:
                self.started[shard] = self.submit(shard, expected)
                self.waiting.discard(shard)

    def _expected(self, shard: str) -> int | None:
        """The part's row count: `shard_rows` once that many are counted (every part has at most
        that many), else from its input's read record (None until it is written)."""
        if self.counts[shard] == self.shard_rows:
            return self.shard_rows
        stem, _, number = shard.rpartition("-")
        if stem not in self.records:
            now = time.monotonic()
            if now - self.looked.get(stem, -RECHECK_S) < RECHECK_S:
                return None
            self.looked[stem] = now
            record = next(parts.read_records(self.out, [stem]))
            if record is None:
                return None
            self.records[stem] = int(record["records"])
        return min(self.shard_rows, self.records[stem] - int(number) * self.shard_rows)
