"""Rebuild the data-pipeline test fixtures from the embedded sample (pretrain/sample/), byte-stable.

.venv/bin/python tests/data/data_pipeline/build_fixtures.py
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from warcio.archiveiterator import ArchiveIterator
from warcio.warcwriter import WARCWriter

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parents[2] / "pretrain" / "sample"


def _jsonl() -> None:
    with gzip.open(SAMPLE / "prose.jsonl.gz") as handle:
        rows = [json.loads(line) for line in handle]
    english = [r for r in rows if r["meta"].get("lang") == "en" and 400 < len(r["text"]) < 3000]
    chinese = [r for r in rows if r["meta"].get("lang") == "zh" and 200 < len(r["text"]) < 3000]
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in english[:4] + chinese[:4]]
    lines += [
        b'{"id": "broken-json", "text": "unterminated',
        b'{"id": "bad-utf8", "text": "caf\xe9 au lait"}',
        json.dumps(
            {
                "id": "nul-bytes",
                "text": "Text with a NUL \x00 byte in the middle of a "
                "perfectly ordinary English sentence about file systems.",
            }
        ).encode(),
        json.dumps({"id": "empty-doc", "text": "   \n  "}).encode(),
        json.dumps({"id": "no-text", "body": "a record without text"}).encode(),
    ]
    (HERE / "docs.jsonl").write_bytes(b"\n".join(lines) + b"\n")


def _warc() -> None:
    wanted = {"text/html; charset=gbk": 1, "application/octet-stream": 1}
    english, special = [], []
    with open(SAMPLE / "web.warc.gz", "rb") as handle:
        for record in ArchiveIterator(handle):
            if record.rec_type != "response":
                continue
            url = record.rec_headers.get_header("WARC-Target-URI")
            ctype = record.http_headers.get_header("Content-Type")
            body = record.content_stream().read()
            item = (url, ctype, body, record.rec_headers.get_header("WARC-Record-ID"))
            if wanted.get(ctype, 0) > 0:
                wanted[ctype] -= 1
                special.append(item)
            elif "python3.11-doc" in url and len(english) < 2 and len(body) < 40_000:
                english.append(item)
            elif body.count(b"<div") > 2000 or len(body) < 200:
                special.append(item)
    buffer = io.BytesIO()
    writer = WARCWriter(buffer, gzip=True)
    for url, ctype, body, record_id in english + special:
        http = f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\n\r\n".encode()
        from warcio.statusandheaders import StatusAndHeadersParser

        headers = StatusAndHeadersParser(["HTTP/1.0", "HTTP/1.1"]).parse(io.BytesIO(http))
        record = writer.create_warc_record(
            url,
            "response",
            payload=io.BytesIO(body),
            http_headers=headers,
            warc_headers_dict={"WARC-Record-ID": record_id, "WARC-Date": "2026-11-01T00:00:00Z"},
        )
        writer.write_record(record)
    (HERE / "pages.warc.gz").write_bytes(buffer.getvalue())


def _parquet() -> None:
    table = pq.read_table(SAMPLE / "code.parquet")
    small = [r for r in table.to_pylist() if len(r["text"]) < 4000][:4]
    pq.write_table(
        pa.Table.from_pylist(small, schema=table.schema), HERE / "code.parquet", compression="zstd"
    )


if __name__ == "__main__":
    _jsonl()
    _warc()
    _parquet()
