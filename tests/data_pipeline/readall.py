"""Every row the reader gives for one local input file, and the reader's stats: the tests' one way
to read a file without a job (formats, damage, hostile inputs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from data_pipeline.formats import InputFile, detect_format
from data_pipeline.readers import read_unit


def read_all(
    path: Path,
    *,
    shard_rows: int = 100,
    batch_rows: int = 7,
    eval_fraction: float = 0.005,
    **kwargs: Any,
) -> tuple[pa.Table | None, dict]:
    """`path`'s rows as one table (None when the reader gave no batch) and the reader's stats."""
    fmt, stem = detect_format(str(path))
    stats: list[dict] = []
    tables = list(
        read_unit(
            (InputFile(str(path), fmt, stem),),
            stem,
            shard_rows=shard_rows,
            batch_rows=batch_rows,
            eval_fraction=eval_fraction,
            stats=stats,
            **kwargs,
        )
    )
    return (pa.concat_tables(tables) if tables else None), stats[0]
