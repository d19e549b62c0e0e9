"""Extract stage on real pages and hard cases, in-process (no Ray)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from data_pipeline.batcher import RAW_SCHEMA
from data_pipeline.stages.extract import ExtractConfig, ExtractStage, decode_html
from data_pipeline.stages.registry import schema_for

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
CHINESE = "这是一个使用中文编写的网页，用来测试字符集检测是否正确。" * 5
ARTICLE = (
    "<html><head><title>t</title></head><body><nav><a href='/'>Home</a> | <a href='/x'>Docs</a>"
    "</nav><article><h1>Virtual memory file systems</h1>{}</article>"
    "<footer>Copyright footer links</footer></body></html>"
)


def _raw(payloads: list[bytes | None], content_type: str = "text/html", texts=None) -> pa.Table:
    n = len(payloads)
    texts = texts or [None] * n
    rows = {
        "id": [f"doc-{i}" for i in range(n)],
        "text": texts,
        "url": [None] * n,
        "source": ["test"] * n,
        "meta": [None] * n,
        "split": ["train"] * n,
        "_payload": payloads,
        "_content_type": [content_type] * n,
        "_read_reason": [None] * n,
        "_raw_bytes": [len(p or b"") for p in payloads],
        "_shard": ["t-00000"] * n,
        "_row": list(range(n)),
    }
    return pa.Table.from_pydict(rows, schema=RAW_SCHEMA)


def _run(table: pa.Table, **config) -> list[dict]:
    stage = ExtractStage(ExtractConfig(**config))
    stage.setup()
    return stage(table).to_pylist()


@pytest.mark.parametrize("extractor", ["resiliparse", "trafilatura"])
def test_main_text_kept_and_navigation_removed(extractor: str) -> None:
    body = "".join(
        f"<p>Tmpfs keeps all of its files in virtual memory, paragraph {i}. "
        "Everything in tmpfs is temporary in the sense that no files are created "
        "on your hard drive.</p>"
        for i in range(6)
    )
    [row] = _run(_raw([ARTICLE.format(body).encode()]), extractor=extractor)
    assert row["extract_reason"] is None and row["extractor"] == extractor
    assert "Tmpfs keeps all of its files in virtual memory, paragraph 5" in row["text"]
    assert "Copyright footer" not in row["text"]
    assert row["num_bytes"] == len(row["text"].encode())


def test_output_matches_the_registered_schema() -> None:
    table = ExtractStage()(_raw([b"<p>hello world</p>"]))
    hidden = [n for n in table.column_names if n.startswith("_")]
    assert table.drop_columns(hidden).schema.equals(schema_for(["extract"]), check_metadata=False)


def test_gbk_page_decoded_with_and_without_declared_charset() -> None:
    html = f"<html><body><article><p>{CHINESE}</p></article></body></html>"
    declared = html.replace("<html>", "<html><head><meta charset='gbk'></head>")
    assert CHINESE[:20] in decode_html(declared.encode("gbk"))
    assert CHINESE[:20] in decode_html(html.encode("gbk"))  # charset-normalizer's guess
    [row] = _run(_raw([html.encode("gbk")], content_type="text/html; charset=gbk"))
    assert CHINESE[:20] in row["text"]


def test_invalid_utf8_and_nul_bytes_do_not_break_a_page() -> None:
    payload = (
        b"<html><body><p>Caf"
        + b"\xe9\xff"
        + b" au lait \x00 is served all day in this little place.</p></body></html>"
    )
    [row] = _run(_raw([payload], content_type="text/html; charset=utf-8"))
    assert row["extract_reason"] is None
    assert "au lait" in row["text"] and "\x00" not in row["text"]


def test_hard_cases_get_reasons() -> None:
    nested = b"<html><body>" + b"<div>" * 3000 + b"deep text" + b"</div>" * 3000 + b"</body></html>"
    payloads = [b"\x89PNG\r\n\x1a\n\x00\x00\x00binary", b"<html><body>  </body></html>", nested]
    rows = _run(_raw(payloads[:2], content_type="image/png")[:1]) + _run(_raw(payloads[1:]))
    assert [r["extract_reason"] for r in rows[:2]] == ["not_text", "empty"]
    assert rows[2]["extract_reason"] in (None, "empty", "extraction_failed")


def test_size_cap_rejects_a_50mb_document_before_parsing() -> None:
    huge = b"<html><body><p>" + b"word " * (10 * 2**20) + b"</p></body></html>"
    text = "word " * (10 * 2**20)
    rows = _run(_raw([huge]), max_input_bytes=5_000_000)
    rows += _run(_raw([None], texts=[text]), max_input_bytes=5_000_000)
    assert [r["extract_reason"] for r in rows] == ["too_large", "too_large"]
    assert rows[0]["text"] is None


def test_time_limit_stops_a_slow_extraction() -> None:
    paragraphs = "".join(
        f"<div><p>Paragraph {i} has several ordinary words in it.</p></div>" for i in range(20_000)
    )
    page = f"<html><body>{paragraphs}</body></html>".encode()
    [row] = _run(_raw([page]), extractor="trafilatura", timeout_s=0.05, max_input_bytes=50_000_000)
    assert row["extract_reason"] == "timeout"


@pytest.mark.timeout(120)
def test_nested_markup_cannot_outrun_the_limit() -> None:
    """100,000 nested <div>s (1.1 MB, under max_input_bytes) cost resiliparse minutes in one C
    call; the old in-process limit (between bytecodes) waited it out. Now the page is one timeout
    row within seconds and the rest of the batch goes on."""
    import time

    depth = 100_000
    page = (
        "<html><body>" + "<div>" * depth + "deep" + "</div>" * depth + "</body></html>"
    ).encode()
    started = time.monotonic()
    rows = _run(_raw([page, _ARTICLE_OK]), timeout_s=1.0)
    assert [r["extract_reason"] for r in rows] == ["timeout", None]
    assert time.monotonic() - started < 60


def test_text_records_are_cleaned_not_parsed() -> None:
    rows = _run(_raw([None, None], texts=["  line one\r\nline two\x00  ", " \n "]))
    assert rows[0]["text"] == "line one\nline two" and rows[0]["extractor"] == "text"
    assert rows[1]["extract_reason"] == "empty"


_ARTICLE_OK = ARTICLE.format(
    "<p>A short page that finishes well in time, with a few ordinary sentences.</p>" * 6
).encode()


def test_time_limit_also_applies_on_a_worker_thread() -> None:
    """Ray Data calls actors on a thread pool, where SIGALRM cannot be used."""
    import threading

    paragraphs = "".join(
        f"<div><p>Paragraph {i} has several ordinary words in it.</p></div>" for i in range(20_000)
    )
    page = f"<html><body>{paragraphs}</body></html>".encode()
    rows: list[dict] = []
    worker = threading.Thread(
        target=lambda: rows.extend(
            _run(
                _raw([page, _ARTICLE_OK]),
                extractor="trafilatura",
                timeout_s=0.05,
                max_input_bytes=50_000_000,
            )
        )
    )
    worker.start()
    worker.join(60)
    assert [r["extract_reason"] for r in rows] == ["timeout", None]
