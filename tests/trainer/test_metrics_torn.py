"""RUN/metrics.jsonl after a run killed mid-write: the resumed run appends and closes."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.metrics import MetricsLog, read_metrics


def test_a_torn_last_line_neither_glues_the_next_record_nor_crashes_the_close(
    tmp_path: Path,
) -> None:
    """The resumed run appended its first record onto the torn line, and its close (loss.png,
    summary.json) read the file with json.loads: a JSONDecodeError traceback at the end of a
    run that had trained."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 1, "loss": 5.0}) + "\n" + '{"step": 2, "lo')
    writer = MetricsLog(tmp_path, rank=0)
    writer.log({"step": 2, "loss": 4.0})
    writer.log({"step": 3, "loss": 3.0})
    writer.close()
    assert [r["step"] for r in read_metrics(metrics)] == [1, 2, 3]
    assert metrics.read_text().splitlines()[2] == json.dumps({"loss": 4.0, "step": 2})
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
