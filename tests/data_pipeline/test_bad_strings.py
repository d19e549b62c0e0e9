"""A lone surrogate (a JSON `\\udc80` escape: no Unicode text can hold it) in ANY string field a
record brings is cleaned like the text (`?`), never a failed run: one in `source` ended
`pretrain data run` with pyarrow's UnicodeEncodeError and no ledger, losing the whole input."""

from __future__ import annotations

import json
from pathlib import Path

from pretrain_app.cli import main
from tests.data_pipeline.readall import read_all

RECORDS = [
    {"id": "good", "text": "an ordinary document of a few words"},
    {"id": "src", "text": "a document whose source is broken", "source": "\udc80"},
    {"id": "u", "text": "a document whose url is broken", "url": "http://x.example/\ud800"},
    {"id": "id\udc80", "text": "a document whose id is broken"},
    {"id": "meta", "text": "a document whose metadata is broken", "meta": {"k\udc80": "v\ud801"}},
]


def _write(path: Path) -> Path:
    # json.dumps writes the surrogates as \\udc80 escapes, as a real broken producer does
    path.write_text("".join(json.dumps(record) + "\n" for record in RECORDS))
    return path


def test_every_string_field_is_cleaned_at_the_reader(tmp_path: Path) -> None:
    table, _ = read_all(_write(tmp_path / "bad.jsonl"), max_input_bytes=1 << 20)
    rows = {row["id"]: row for row in table.to_pylist()}
    assert len(rows) == len(RECORDS) and all(r["_read_reason"] is None for r in rows.values())
    assert rows["bad/src"]["source"] == "?"
    assert rows["bad/u"]["url"] == "http://x.example/?"
    assert "bad/id?" in rows
    assert [(e["key"], e["str"]) for e in rows["bad/meta"]["meta"]] == [("meta.k?", "v?")]


def test_a_data_run_keeps_every_document_of_the_input(tmp_path: Path, ray_local, capsys) -> None:
    _write(tmp_path / "bad.jsonl")
    config = tmp_path / "job.yaml"
    config.write_text(
        f"inputs: [{tmp_path / 'bad.jsonl'}]\noutput: {tmp_path / 'out'}\nstages: {{extract: {{}}}}\n"
    )
    assert main(["data", "run", str(config)]) == 0
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert (ledger["documents_in"], ledger["documents_kept"]) == (5, 5), ledger


def test_a_corpus_read_with_the_wrong_text_field_is_one_line(tmp_path, ray_local, capsys) -> None:
    """RedPajama-v2 records keep their text in `raw_content`: read with the default text field,
    the run exited 0 with "0 kept, 20 dropped (missing_text)"."""
    path = tmp_path / "rp2.jsonl"
    record = {"raw_content": "a page of text", "doc_id": "x", "meta": {"url": "http://a.example"}}
    path.write_text(json.dumps(record) + "\n")
    config = tmp_path / "job.yaml"
    config.write_text(f"inputs: [{path}]\noutput: {tmp_path / 'out'}\nstages: {{extract: {{}}}}\n")
    assert main(["data", "run", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("pretrain data run: error: input ") and "Traceback" not in err
    assert "fields found: doc_id, meta, raw_content); set text_field" in err[-1], err
    fixed = main(
        ["data", "run", str(config), "--set", "text_field=raw_content", "--set", "overwrite=true"]
    )
    assert fixed == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "ledger.json").read_text())["documents_kept"] == 1
