"""The first global stage's map side, computed in the stream, one piece at a time.

A global stage whose `map_part` is row-wise (each row's map output depends on that row alone, so
a part's output is the concatenation of its pieces' outputs: `GlobalStage.combine_maps`) is
mapped by the stage actors right after the map stages before it, while the rows are still in
memory: the stream's actors scale with the workers, a separate phase over every part would read
every row again and wait for its slowest part. Beside each piece `pieces/<shard>/<a>-<b>.<sha256>.parquet`
the actor writes `pieces/<shard>/<stage>/<a>-<b>.<table>.parquet` for each table and, last,
`<a>-<b>.json` (the piece's rows, counts, CPU-seconds and each table's sha256: a table whose
bytes changed is never combined).

The part's map task (global_parts.map_task) then only combines: when the pieces' records cover
the part's rows exactly (one record per rows piece, their row ranges disjoint: a retried actor
task that cut its block differently leaves overlapping pieces), it concatenates them in row order
and persists the part as before; otherwise it maps the part's rows whole, as without this. Either
way the part's persisted map output holds the same values, so the tags are the same.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data_pipeline.stages.base import GlobalStage
from pretrain.storage import OutPath, listed, write_atomic, write_json


def write(stage: GlobalStage, piece: pa.Table, folder: OutPath, name: str) -> None:
    """Map one piece of the shard whose pieces are in `folder` (`name` = `<first>-<last>`, as
    its rows file) and write its tables, then its record."""
    start = time.process_time()
    tables, info = stage.map_part(piece)
    spent = time.process_time() - start
    target = folder / stage.name
    target.mkdir(parents=True, exist_ok=True)
    digests = {}
    for table_name, table in tables.items():
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="lz4")
        data = sink.getvalue().to_pybytes()
        write_atomic(target / f"{name}.{table_name}.parquet", data)
        digests[table_name] = hashlib.sha256(data).hexdigest()
    record = {
        "rows": piece.num_rows,
        "tables": sorted(tables),
        "sha256": digests,
        "info": info,
        "cpu_s": spent,
    }
    write_json(target / f"{name}.json", record)


def _verified(path: OutPath, record: dict[str, Any], table: str) -> pa.Table | None:
    """The table `path` holds when its bytes have the sha256 the piece's record holds."""
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != record["sha256"][table]:
        return None
    return pq.read_table(pa.BufferReader(data))


def _ranges(names: list[str]) -> list[tuple[int, int]] | None:
    try:
        return [(int(a), int(b)) for a, b in (n.split("-") for n in names)]
    except ValueError:
        return None


def combined(
    pieces_dir: OutPath, stage: GlobalStage, rows: pa.Table
) -> tuple[dict[str, pa.Table], dict[str, Any], float] | None:
    """The part's map output from the (tables, counts, CPU-seconds) of its pieces in
    `pieces_dir`, or None when they do not cover `rows` (the part's rows in row order) exactly
    once (module docstring)."""
    names = [p.name.split(".", 1)[0] for p in listed(pieces_dir, "*.parquet")]  # <a>-<b>
    ranges = _ranges(names)
    if not names or ranges is None:
        return None
    order = sorted(range(len(names)), key=lambda i: ranges[i])
    folder = pieces_dir / stage.name
    pieces, spent, covered, last = [], 0.0, 0, -1
    for i in order:
        first, final = ranges[i]
        if first <= last:  # overlapping pieces: a retried task cut its block differently
            return None
        try:
            record = json.loads((folder / f"{names[i]}.json").read_text(encoding="utf-8"))
            tables = {
                t: _verified(folder / f"{names[i]}.{t}.parquet", record, t)
                for t in record["tables"]
            }
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a piece mapped by no actor (or a worker killed while it wrote)
        if any(table is None for table in tables.values()):
            return None  # a table changed since it was written (a flipped byte decodes too)
        pieces.append((tables, record["info"]))
        spent += float(record["cpu_s"])
        covered += int(record["rows"])
        last = final
    if covered != rows.num_rows:
        return None
    joined = stage.combine_maps(pieces)
    if joined is None:
        return None
    return joined[0], joined[1], spent
