import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq

from pretrain.sample import SAMPLE_FILES, sample_dir


def test_sample_readme_accounts_for_every_file():
    readme = (sample_dir() / "README.md").read_text()
    shipped = {
        p.name
        for p in Path(sample_dir()).iterdir()
        if p.is_file() and p.suffix not in {".py", ".pyc"} and p.name != "README.md"
    }
    assert shipped == set(SAMPLE_FILES)
    for name in shipped:
        assert f"`{name}`" in readme, name


def test_sample_is_small_and_holds_the_hard_cases():
    total = sum((sample_dir() / name).stat().st_size for name in SAMPLE_FILES)
    assert total < 5_000_000
    with gzip.open(sample_dir() / "prose.jsonl.gz", "rt", encoding="utf-8") as handle:
        docs = [json.loads(line) for line in handle]
    sources = {d["source"] for d in docs}
    assert {"hand:pii-en", "hand:garbled", "hand:empty", "hand:log-like"} <= sources
    assert any(d["source"].endswith("#rev2") for d in docs)
    assert any("\u4e00" <= ch <= "\u9fff" for d in docs[:400] for ch in d["text"][:50])
    code = pq.read_table(sample_dir() / "code.parquet")
    assert set(code.column("programming_language").to_pylist()) >= {"python", "c"}
    raw = (sample_dir() / "bad.jsonl").read_bytes()
    assert b"\xff" in raw  # invalid UTF-8 stays invalid
    warc = gzip.decompress((sample_dir() / "web.warc.gz").read_bytes())
    assert b"charset=gbk" in warc
    assert b"Content-Type: application/octet-stream" in warc or b"Content-Type: image/" in warc
