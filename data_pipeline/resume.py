"""What a (re-)run of the data job computes, from what an earlier run into the same output left:
finished parts (shards whose files verify), inputs' read records, and the global stages'
persisted map output (data_pipeline.global_parts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from data_pipeline import global_parts, parts
from data_pipeline.config import PipelineConfig
from data_pipeline.fingerprint import FINGERPRINT
from data_pipeline.stages.base import Stage
from pretrain import shards_layout as layout
from pretrain.storage import OutPath, remove_tree


def restart(out: OutPath) -> dict[str, set[int]]:
    """Forget every shard of an unfinished run with a global stage (shards, rejects, ledger
    fragments): their global tags are computed again. The inputs' read records and the global
    stages' persisted map output are kept (each reused while it verifies)."""
    for sub in (layout.DATA_DIR, layout.REJECTS_DIR):
        remove_tree(out / sub)
    for path in (out / parts.PARTS).glob("*.json"):
        if path.name != FINGERPRINT and not path.name.endswith(".read.json"):
            path.unlink()
    parts.ensure_dirs(out)
    return {}


@dataclass
class Work:
    """What this run computes: the inputs to read, the parts skipped at read time, and the
    inputs whose shards are (re)written."""

    read: list[dict[str, str]]
    skip: dict[str, set[int]]
    merge: list[str]
    globals: bool

    def __bool__(self) -> bool:
        return bool(self.read or self.merge)


def plan_work(
    config: PipelineConfig,
    stages: list[Stage],
    inputs: list[Any],
    out: OutPath,
    on_verified: Callable[[str, bytes], None] | None = None,
) -> tuple[Work, dict[str, set[int]]]:
    """What to compute, and the parts reused (`done`); `on_verified` gets the fragment bytes of
    every part the scan verified (parts.finished_parts): those of a run with a global stage are
    then forgotten (`restart`), and `done` is empty."""
    done = parts.finished_parts(out, on_verified)
    stems = [f.stem for f in inputs]
    records = dict(zip(stems, parts.read_records(out, stems), strict=True))  # kept by restart
    unfinished = [f for f in inputs if not parts.record_done(records[f.stem], f.stem, done)]
    items = {f.stem: {"path": f.path, "format": f.format, "stem": f.stem} for f in inputs}
    _, globals_ = global_parts.plan(stages)
    if not unfinished or not globals_:
        todo = [items[f.stem] for f in unfinished]
        return Work(todo, done, [t["stem"] for t in todo], False), done
    # Global tags (duplicate clusters, perplexity cutoffs) depend on every document: every shard
    # is written again, from the first global stage's map output where it is already persisted.
    done = restart(out)
    rows = global_parts.expected_rows(out, list(items), config.shard_rows)
    skip: dict[str, set[int]] = {}
    for part in global_parts.reusable(out, globals_[0][0], rows):
        stem, _, number = part.rpartition("-")
        skip.setdefault(stem, set()).add(int(number))
    read = [items[f.stem] for f in inputs if not parts.record_done(records[f.stem], f.stem, skip)]
    return Work(read, skip, list(items), True), done
