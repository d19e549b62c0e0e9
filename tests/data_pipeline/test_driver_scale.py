"""The driver's bookkeeping at the part counts a 40 TB run has (millions of parts, a million
inputs): the ledger folds fragments without holding them, and forgetting changed inputs lists the
output once, not once per input (benchmarks/bench_driver_scale.py measures both)."""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from data_pipeline import ledger, parts
from pretrain import shards_layout as layout


class _Fragment(dict):  # a plain dict cannot be weakly referenced
    pass


def _row(stage: str, reason: str, domain: str, outcome: str, *counts: int) -> dict[str, Any]:
    keys = ("documents", "bytes", "text_bytes")
    row = {"stage": stage, "reason": reason, "domain": domain, "lang": "en", "outcome": outcome}
    return {**row, **dict(zip(keys, counts, strict=True))}


def _fragment(i: int) -> _Fragment:
    return _Fragment(
        rows=[
            _row("pass", "pass", f"d{i % 3}", "kept", 2, 20, 10),
            _row("dedup", "duplicate", "d0", "dropped", 1, 7, 0),
        ],
        flags={"quality": {"low": {"documents": 1, "bytes": 5}}},
    )


def test_the_ledger_folds_fragments_one_at_a_time() -> None:
    """A driver holding every fragment of a 40 TB run (millions) would need tens of GB; each is
    folded into the sums and let go before the next is read. Reference counting frees a
    fragment nothing holds at once (a fragment is a plain dict: no cycle), so no gc.collect() is
    needed (300 of them took ~2 minutes in a long test session's heap)."""
    previous: list[weakref.ref[Any]] = []
    held_while_reading = 0

    def fragments() -> Iterator[dict[str, Any]]:
        nonlocal held_while_reading
        for i in range(300):
            # the caller's loop variable may still name the one just folded, no older one
            held_while_reading += sum(ref() is not None for ref in previous[:-1])
            frag = _fragment(i)
            previous.append(weakref.ref(frag))
            yield frag
            del frag

    led = ledger.aggregate(fragments(), ["dedup", "quality"], 900, 8100)
    assert held_while_reading == 0
    assert led["parts"] == 300 and led["conservation"]["balanced"]
    assert led["documents_kept"] == 600 and led["documents_dropped"] == 300
    dedup, quality = led["stages"]
    assert dedup["reasons"] == {"duplicate": {"documents": 300, "bytes": 2100, "action": "dropped"}}
    assert quality["reasons"] == {"low": {"documents": 300, "bytes": 1500, "action": "tagged"}}
    assert led["domains"]["d1"] == {"documents": 200, "text_bytes": 1000}


def _output(root: Path, stems: list[str], per_input: int) -> dict[str, str]:
    """A synthetic output: every file a part leaves, mapped to the input it belongs to."""
    parts.ensure_dirs(root)
    (root / parts.PARTS / parts.GLOBAL / "dedup").mkdir(parents=True)
    owner: dict[str, str] = {}
    for stem in stems:
        files = [parts.read_stats_path(root, stem)]
        for number in range(per_input):
            shard = f"{stem}-{number:05d}"
            parts.rows_dir(root, shard).mkdir(parents=True)
            files += [root / layout.data_file(shard), root / layout.rejects_file(shard)]
            files += [
                parts.part_record_path(root, shard),
                parts.rows_dir(root, shard) / "0.parquet",
            ]
            files += [
                root / parts.PARTS / parts.GLOBAL / "dedup" / f"{shard}.{table}"
                for table in ("rows.pq", "bands.pq", "json")
            ]
        for path in files:
            path.write_bytes(b"x")
            owner[str(path.relative_to(root))] = stem
    return owner


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_forgetting_changed_inputs_removes_exactly_their_parts(tmp_path: Path) -> None:
    """Names that look alike stay apart: input `a` is not input `a-00001` (whose parts are
    `a-00001-0000N`) nor `a.b`; a stem may hold dots; a part numbered past 99,999 is `a`'s."""
    owner = _output(tmp_path, ["a", "a-00001", "a.b", "c4-train.00000-of-01024"], 2)
    (tmp_path / layout.data_file("a-100000")).write_bytes(b"x")
    parts.forget_inputs(tmp_path, ["a", "c4-train.00000-of-01024"])
    assert _files(tmp_path) == {f for f, stem in owner.items() if stem in ("a-00001", "a.b")}


def test_forgetting_every_input_lists_each_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose inputs all changed (an rsync rewrote every mtime) must not list the whole
    output once per input: at a million inputs that is 10^12 names."""
    stems = [f"in{i}" for i in range(40)]
    _output(tmp_path, stems, 1)
    listings = 0
    glob = Path.glob

    def counted(self: Path, pattern: str, **kwargs: Any):
        nonlocal listings
        listings += 1
        return glob(self, pattern, **kwargs)

    monkeypatch.setattr(Path, "glob", counted)
    parts.forget_inputs(tmp_path, stems)
    monkeypatch.undo()
    assert listings <= 6, listings  # four part folders, the global folder and its one stage
    assert _files(tmp_path) == set()


def test_a_part_that_no_longer_verifies_is_forgotten(tmp_path: Path) -> None:
    """The resume scan forgets a part whose shard changed: its part record too."""
    table_bytes = b"not the recorded bytes"
    shard = "web-00000"
    parts.ensure_dirs(tmp_path)
    (tmp_path / layout.data_file(shard)).write_bytes(table_bytes)
    record = {"bytes": len(table_bytes) + 1, "sha256": "0" * 64, "rows": 1}
    fragment = {"shard": shard, "files": {layout.data_file(shard): record}}
    parts.part_record_path(tmp_path, shard).write_text(json.dumps(fragment))
    assert parts.finished_parts(tmp_path) == set()
    assert not parts.part_record_path(tmp_path, shard).exists()
