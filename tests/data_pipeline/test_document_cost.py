"""Through the real runner (Ray): a page and a text that each cost a stage minutes in one C call
finish as one `timeout` row each within their limits, and every other document goes on (#34 items
2 and 6). Before: the nested-div page kept a run at 0/31 docs for 150 s (the limit interrupted
Python only between bytecodes), and the rules stage had no per-document limit at all."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pretrain_app.cli import main

DEPTH = 100_000  # nested <div>s: resiliparse's parse is quadratic in depth (minutes here)
CRAFTED = " ".join(["!" * 999] * 4000) + " end."  # 4 MB: ~50 CPU-s of regex backtracking


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_a_run_with_hostile_documents_finishes_with_one_timeout_row_each(
    ray_local, tmp_path: Path
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    nested = "<html><body>" + "<div>" * DEPTH + "deep" + "</div>" * DEPTH + "</body></html>"
    (inputs / "nested.html").write_text(nested)
    (inputs / "plain.html").write_text(
        "<html><body><article><p>An ordinary page with a few sentences of text. "
        "It is kept as it always was.</p></article></body></html>"
    )
    docs = [{"id": "crafted", "text": CRAFTED}, {"id": "prose", "text": "A short document."}]
    (inputs / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    out, config = tmp_path / "out", tmp_path / "job.yaml"
    config.write_text(
        f"inputs: [{inputs}]\noutput: {out}\n"
        "stages: {extract: {timeout_s: 1}, rules: {timeout_s: 1}, dedup: {}}\n"
    )
    started = time.monotonic()
    assert main(["data", "run", str(config), "-q"]) == 0
    assert time.monotonic() - started < 400  # Ray start-up on a loaded machine included
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["conservation"]["balanced"] and ledger["documents_in"] == 4
    reasons = {s["stage"]: s["reasons"] for s in ledger["stages"]}
    assert reasons["extract"]["timeout"]["documents"] == 1
    assert reasons["rules"]["timeout"]["documents"] == 1
    assert reasons["rules"]["timeout"]["action"] == "tagged"
    kept = [
        r for p in sorted((out / "data").glob("*.parquet")) for r in pq.read_table(p).to_pylist()
    ]
    by_text = {r["text"][:20]: r["rules_reason"] for r in kept}
    assert len(kept) == 3 and by_text[CRAFTED[:20]] == "timeout"
    assert sum(reason == "timeout" for reason in by_text.values()) == 1
