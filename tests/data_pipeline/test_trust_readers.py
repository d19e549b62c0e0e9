"""Readers as users hit them: Dolma .json.gz, Pile/RedPajama .jsonl.zst, configurable text and id
fields, ids unique across inputs, nothing in a directory skipped unseen, cleaning that keeps
words apart (issue 12 items 7, 8, 12; issue 14 item 6)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.inputs import plan_inputs
from data_pipeline.readers import Fields
from data_pipeline.stages.extract import ExtractConfig, ExtractStage, clean_text_counted
from pretrain.errors import InputError
from pretrain_app.cli import main
from tests.data_pipeline.readall import read_all
from tests.data_pipeline.test_trust_sizes import prose


def _lines(docs: list[dict]) -> bytes:
    return "".join(json.dumps(d) + "\n" for d in docs).encode()


def _zst(path: Path, data: bytes) -> Path:
    with pa.CompressedOutputStream(str(path), "zstd") as sink:
        sink.write(data)
    return path


def test_dolma_json_gz_and_pile_jsonl_zst(tmp_path: Path) -> None:
    dolma = tmp_path / "dolma-0000.json.gz"
    dolma.write_bytes(
        gzip.compress(_lines([{"id": f"d{i}", "text": prose(i), "source": "c4"} for i in range(9)]))
    )
    pile = _zst(
        tmp_path / "pile-00.jsonl.zst",
        _lines([{"text": prose(i), "meta": {"pile_set_name": "ArXiv"}} for i in range(12)]),
    )
    table, stats = read_all(dolma)
    assert stats["records"] == table.num_rows == 9
    assert table.column("id").to_pylist()[:2] == ["dolma-0000/d0", "dolma-0000/d1"]
    assert table.column("text").to_pylist() == [prose(i) for i in range(9)]
    table, stats = read_all(pile)
    assert stats["records"] == table.num_rows == 12
    assert table.column("_read_reason").null_count == 12
    assert {e["key"]: e["str"] for e in table.column("meta")[0].as_py()} == {
        "meta.pile_set_name": "ArXiv"
    }


def test_truncated_zst_keeps_what_was_read_and_counts_the_rest(tmp_path: Path) -> None:
    whole = _zst(tmp_path / "w.jsonl.zst", _lines([{"text": prose(i)} for i in range(3000)]))
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    table, stats = read_all(cut)
    reasons = table.column("_read_reason").to_pylist()
    assert stats["records"] == table.num_rows and reasons[-1] == "truncated_input"
    assert 0 < reasons.count(None) < 3000
    (tmp_path / "fake.jsonl.zst").write_bytes(b'{"text": "not compressed"}\n')
    with pytest.raises(InputError, match="not a zstd file"):
        read_all(tmp_path / "fake.jsonl.zst")


def test_text_and_id_fields_for_jsonl_and_parquet(tmp_path: Path) -> None:
    rp2 = tmp_path / "rp2.jsonl"
    rp2.write_bytes(
        _lines([{"raw_content": prose(i), "meta": {"doc_id": f"x{i}"}} for i in range(3)])
    )
    table, _ = read_all(rp2, fields=Fields(text="raw_content", id="meta.doc_id"))
    assert table.column("id").to_pylist() == ["rp2/x0", "rp2/x1", "rp2/x2"]
    assert table.column("text").to_pylist() == [prose(i) for i in range(3)]
    pq.write_table(
        pa.table({"content": [prose(1), prose(2)], "uid": ["a", "b"]}), tmp_path / "fw.parquet"
    )
    table, _ = read_all(tmp_path / "fw.parquet", fields=Fields(text="content", id="uid"))
    assert table.column("id").to_pylist() == ["fw/a", "fw/b"]
    assert table.column("_read_reason").null_count == 2
    # default fields: no record has `text`: the wrong field, one line naming those found (it
    # "succeeded" with every document a missing_text reject)
    with pytest.raises(
        InputError, match=r"no record has the text field 'text' \(fields found: meta, raw_content\)"
    ):
        read_all(rp2)
    table, _ = read_all(rp2, on_unreadable="reject")  # asked for rejects: a row each, no more
    assert table.column("_read_reason").to_pylist() == ["missing_text"] * 3
    some = tmp_path / "some.jsonl"  # a record without text among others is a reject row, kept
    some.write_bytes(_lines([{"text": prose(1)}, {"raw_content": prose(2)}]))
    table, _ = read_all(some)
    assert table.column("_read_reason").to_pylist() == [None, "missing_text"]


def test_ids_repeated_inside_a_file_are_made_unique_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "rep.jsonl"
    path.write_bytes(_lines([{"id": str(i % 3), "text": prose(i)} for i in range(7)]))
    table, stats = read_all(path)
    ids = table.column("id").to_pylist()
    assert len(set(ids)) == 7 and ids[:3] == ["rep/0", "rep/1", "rep/2"]
    assert stats["id_collisions"] == 4 and ids[3] == "rep/0#3"


def test_directory_files_are_read_or_listed_with_a_reason(tmp_path: Path) -> None:
    for name in ("a.jsonl", "b.json.gz", "c.jsonl.zst", "notes.txt", "meta.json", ".hidden.jsonl"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "x.jsonl").write_bytes(b"")
    skipped: list = []
    files = plan_inputs([str(tmp_path)], skipped)
    assert [f.name for f in files] == ["a.jsonl", "b.json.gz", "c.jsonl.zst"]
    reasons = {Path(s["path"]).name: s["reason"] for s in skipped}
    assert set(reasons) == {"notes.txt", "meta.json", ".hidden.jsonl", ".cache"}
    assert reasons["notes.txt"].startswith("unsupported format: suffix .txt")
    assert reasons[".hidden.jsonl"].startswith("hidden file")
    assert reasons[".cache"] == "hidden directory (1 files not read)"


@pytest.mark.parametrize(
    ("raw", "clean", "changed"),
    [
        ("nul\x00inside\x00text", "nul inside text", 2),
        ("tab\x0bsplit and\x00\x00\x01run", "tab split and run", 4),
        ("edge \x00 space\x00", "edge  space", 2),
        ("plain text", "plain text", 0),
    ],
)
def test_cleaning_keeps_words_apart_and_counts(raw: str, clean: str, changed: int) -> None:
    assert clean_text_counted(raw) == (clean, changed)


def test_extract_records_control_characters_in_a_column() -> None:
    from data_pipeline.batcher import RAW_SCHEMA

    rows = {n: [None, None] for n in RAW_SCHEMA.names}
    rows.update(id=["a", "b"], split=["train", "train"], text=["nul\x00inside\x00text", "ok"])
    out = ExtractStage(ExtractConfig())(pa.Table.from_pydict(rows, schema=RAW_SCHEMA))
    assert out.column("text").to_pylist() == ["nul inside text", "ok"]
    assert out.column("control_chars").to_pylist() == [2, 0]


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_two_inputs_with_the_same_ids_and_a_mixed_directory(ray_local, tmp_path, capsys) -> None:
    """ids 0..49 in two files with different texts: 100 distinct documents, none a duplicate;
    a Dolma and a Pile file are read; the other files are in skipped_files and the summary."""
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.jsonl").write_bytes(_lines([{"id": i, "text": prose(i)} for i in range(50)]))
    (data / "b.jsonl").write_bytes(_lines([{"id": i, "text": prose(100 + i)} for i in range(50)]))
    (data / "c.json.gz").write_bytes(gzip.compress(_lines([{"id": "0", "text": prose(200)}])))
    _zst(data / "d.jsonl.zst", _lines([{"text": "nul\x00inside\x00text " + prose(300)}]))
    (data / "README.txt").write_text("not a corpus file")
    out = tmp_path / "out"
    argv = ["data", "run", str(Path(__file__).resolve().parents[2] / "configs" / "pipeline.yaml")]
    for item in (f"inputs=[{data}]", f"output={out}", "shard_rows=40"):
        argv += ["--set", item]
    assert main(argv) == 0
    summary = capsys.readouterr().out
    assert "1 files skipped" in summary
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["documents_in"] == 102 and ledger["conservation"]["balanced"]
    assert [Path(s["path"]).name for s in ledger["skipped_files"]] == ["README.txt"]
    assert ledger["id_collisions"] == 0
    rows = pq.read_table(out / "data").to_pylist()
    assert len(rows) == 102 and len({r["id"] for r in rows}) == 102
    assert all(r["dup_keep"] and r["dup_cluster_size"] == 1 for r in rows)
    [nul] = [r for r in rows if r["id"].startswith("d/")]
    assert nul["text"].startswith("nul inside text ") and nul["control_chars"] == 2


_HOLDER = """
import sys
from pretrain.locking import output_lock
with output_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_second_data_run_into_a_held_output_is_refused_in_one_line(tmp_path, capsys) -> None:
    """Another live `data run` holds the output: this one says who, exits 2, writes nothing."""
    import os
    import subprocess
    import sys

    source = tmp_path / "a.jsonl"
    source.write_bytes(_lines([{"text": prose(1)}]))
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PRETRAIN_"))}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        argv = [
            "data",
            "run",
            str(Path(__file__).resolve().parents[2] / "configs" / "pipeline.yaml"),
        ]
        argv += ["--set", f"inputs=[{source}]", "--set", f"output={out}"]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert str(holder.pid) in err and "\n" not in err
        assert not (out / "data").exists()
    finally:
        holder.communicate("\n", timeout=30)
