"""A deeply nested JSON line is read the same whatever the reader's stack depth. Python's parser
gives up at a depth set by the caller's stack, which differs between a Ray worker, the CLI and a
test, so before a 600-deep line was a document when read near the top of a stack and a
`malformed_json` reject 350 frames deeper: one input, two outputs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from data_pipeline.readers import MAX_JSON_DEPTH
from tests.data_pipeline.readall import read_all


def _nested(depth: int) -> bytes:
    """A record whose `meta` value nests `depth` arrays and objects in all (the record is 1)."""
    inner = depth - 1
    arrays, objects = inner // 2, inner - inner // 2
    value = b'{"a":' * objects + b"[" * arrays + b"1" + b"]" * arrays + b"}" * objects
    return b'{"text": "a nested record", "meta": ' + value + b"}\n"


def _at_stack_depth(frames: int, call: Callable[[], Any]) -> Any:
    return call() if frames == 0 else _at_stack_depth(frames - 1, call)


def _rows(path: Path, frames: int) -> list[tuple[str, str | None, str | None]]:
    table, _ = _at_stack_depth(frames, lambda: read_all(path))
    return list(
        zip(
            table.column("id").to_pylist(),
            table.column("text").to_pylist(),
            table.column("_read_reason").to_pylist(),
        )
    )


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 600, 5_000])
def test_a_nested_line_reads_the_same_at_any_stack_depth(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b'{"text": "before"}\n' + _nested(depth) + b'{"text": "after"}\n')
    shallow, deep = _rows(path, 0), _rows(path, 350)
    assert shallow == deep
    reason = None if depth <= MAX_JSON_DEPTH else "malformed_json"
    assert [r for _, _, r in shallow] == [None, reason, None]
