"""Rebuild the embedded demo sample from the development corpus plus hand-written hard cases.

    python tools/build_sample.py --corpus DIR

DIR is the development corpus (BENCHMARKS.md, "Input", describes its files).

Deterministic: the same corpus gives byte-identical files (fixed seed, fixed WARC dates, gzip mtime 0).
See README.md beside this file for what each file holds, its provenance and licences.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import random
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

HERE = Path(__file__).resolve().parents[1] / "pretrain" / "sample"  # the embedded sample
SEED = 20261129
MAX_HTML = 60_000
MAX_TEXT = 12_000
WARC_DATE = "2026-11-01T00:00:00Z"


def _read_jsonl(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _pick(rows: list[dict], n: int, rng: random.Random, pred=lambda r: True) -> list[dict]:
    pool = [r for r in rows if pred(r) and 0 < len(r["text"]) <= MAX_TEXT]
    return rng.sample(pool, min(n, len(pool)))


def _pkg(row: dict) -> str:
    return row["source"].split(":")[1].split("=")[0]


# ---- hand-written hard cases (text written for this project; CC0) --------------------------------

SEO_SPAM = " ".join(["cheap watches best price buy now cheap watches discount cheap watches"] * 60)
NAV_ONLY = "".join(f'<li><a href="/p{i}">Page {i}</a></li>' for i in range(300))
PII_EN = (
    "Contact our support desk at help.desk@example.com or call +1 (415) 555-0134 during office "
    "hours. Billing questions go to billing@example.org. Our backup server is at 192.168.10.24 "
    "and the IPv6 gateway at 2001:db8::8a2e:370:7334. A customer wrote their card number "
    "4111 1111 1111 1111 into the form by mistake, so we deleted the record. The payment note "
    "also listed 5500-0000-0000-0004. Please never send card numbers by e-mail. For deliveries "
    "in Shanghai call 13812345678, and the form had resident ID 11010519491231002X attached."
)
PII_ZH = (
    "如有问题，请发送邮件至 zhang.wei@example.cn 或致电 139-1234-5678 联系客服。"
    "我们的办公电话是 010-62345678。身份证号码 11010519491231002X 已登记，请勿外传。"
    "服务器地址为 10.0.0.8，请不要在公开场合分享这些信息。"
)
UNSAFE_EN = (
    "This page is an example of adult content spam: porn, xxx videos, nude cams and explicit "
    "sex chat, free porn every day, click here for xxx. Also kill yourself messages and "
    "other abusive text that a safety filter should flag for review."
)
GARBLED = "Ã©tÃ© Ã  la plage, câ€™est lâ€™Ã©tÃ© Ã¢â‚¬â„¢ " * 40 + "\ufffd\ufffd\ufffd " * 30
LOG_LIKE = "\n".join(
    f"2026-11-01 12:{i // 60:02d}:{i % 60:02d},{i * 37 % 1000:03d} INFO worker-{i % 4} "
    f"processed batch {i} in {i * 13 % 97} ms status=OK queue=0x{i * 7919:08x}"
    for i in range(200)
)
NESTED_HTML = "<html><body>" + "<div>" * 3000 + "deep text" + "</div>" * 3000 + "</body></html>"


def _html_page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body><nav><a href='/'>Home</a> | <a href='/about'>About</a></nav>"
        f"<main><h1>{title}</h1>{body}</main><footer>(c) example</footer></body></html>"
    )


def _record_id(url: str, payload: bytes) -> str:
    digest = hashlib.sha256(url.encode() + payload).hexdigest()
    return f"<urn:uuid:{uuid.UUID(digest[:32])}>"


def _write_record(writer: WARCWriter, url: str, payload: bytes, content_type: str) -> None:
    headers = StatusAndHeaders(
        "200 OK",
        [("Content-Type", content_type), ("Content-Length", str(len(payload)))],
        protocol="HTTP/1.1",
    )
    record = writer.create_warc_record(
        url,
        "response",
        payload=io.BytesIO(payload),
        http_headers=headers,
        warc_headers_dict={"WARC-Date": WARC_DATE, "WARC-Record-ID": _record_id(url, payload)},
    )
    writer.write_record(record)


def build_warc(corpus: Path, rng: random.Random) -> bytes:
    pages = []
    with open(corpus / "web.warc.gz", "rb") as handle:
        for record in ArchiveIterator(handle):
            if record.rec_type != "response":
                continue
            ctype = record.http_headers.get_header("Content-Type") if record.http_headers else ""
            body = record.content_stream().read()
            pages.append((record.rec_headers.get_header("WARC-Target-URI"), ctype, body))
    html = sorted([p for p in pages if "html" in (p[1] or "") and len(p[2]) <= MAX_HTML])
    binary = [p for p in pages if "html" not in (p[1] or "")][:1]
    chosen = rng.sample(html, min(150, len(html)))
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True)
    for url, ctype, body in chosen + binary:
        _write_record(writer, url, body, ctype)
    # Hard cases.
    base_url, base_ctype, base_body = chosen[0]
    _write_record(
        writer, base_url.replace("docs.example.org", "mirror.example.net"), base_body, base_ctype
    )  # exact duplicate at another URL
    text = base_body.decode("utf-8", "replace")
    near = text.replace("<p>", "<p>Updated for this release. ", 3)
    _write_record(writer, base_url + "?rev=2", near.encode(), base_ctype)  # near duplicate
    cases = [
        (
            "https://deals.example.com/cheap-watches",
            _html_page("Cheap watches", f"<p>{SEO_SPAM}</p>"),
        ),
        ("https://portal.example.com/sitemap", _html_page("Sitemap", f"<ul>{NAV_ONLY}</ul>")),
        ("https://support.example.com/contact", _html_page("Contact", f"<p>{PII_EN}</p>")),
        ("https://support.example.cn/lianxi", _html_page("联系我们", f"<p>{PII_ZH}</p>")),
        ("https://adult.example.com/free", _html_page("Free videos", f"<p>{UNSAFE_EN}</p>")),
        (
            "https://www.pornhub.com/blocked-domain-example",
            _html_page("Blocked domain", "<p>A harmless paragraph on a blocklisted domain.</p>"),
        ),
        ("https://empty.example.com/", "<html><head><title></title></head><body></body></html>"),
        ("https://nested.example.com/deep", NESTED_HTML),
    ]
    for url, page in cases:
        _write_record(writer, url, page.encode("utf-8"), "text/html; charset=utf-8")
    gbk = _html_page(
        "编码测试",
        "<p>这是一个使用 GBK 编码的中文网页，用来测试字符集检测。"
        "网页正文应该被正确解码为 Unicode 文本，而不是乱码。</p>" * 5,
    )
    gbk = gbk.replace('charset="utf-8"', 'charset="gbk"')
    _write_record(
        writer, "https://gbk.example.cn/page", gbk.encode("gbk"), "text/html; charset=gbk"
    )
    bad_utf8 = _html_page("Broken bytes", "<p>Valid text before. " * 20 + "</p>").encode()
    bad_utf8 = bad_utf8.replace(b"before.", b"bef\xff\xfeore.", 5)
    _write_record(writer, "https://broken.example.com/bytes", bad_utf8, "text/html; charset=utf-8")
    return out.getvalue()


def build_prose(corpus: Path, rng: random.Random) -> list[dict]:
    en = _read_jsonl(corpus / "en.jsonl.gz")
    zh = _read_jsonl(corpus / "zh.jsonl.gz")
    math = _read_jsonl(corpus / "math.jsonl.gz")
    rows = (
        _pick(en, 420, rng, lambda r: _pkg(r) != "fortunes" and len(r["text"]) > 400)
        + _pick(en, 80, rng, lambda r: _pkg(r) == "fortunes")
        + _pick(zh, 260, rng, lambda r: _pkg(r) != "fortunes-zh" and len(r["text"]) > 300)
        + _pick(zh, 80, rng, lambda r: _pkg(r) == "fortunes-zh")
        + _pick(math, 160, rng)
    )
    docs = [
        {
            "text": r["text"],
            "source": r["source"],
            "meta": {"lang": r["lang"], "domain": r["domain"]},
        }
        for r in rows
    ]
    # Revisions of the same file: near duplicates with a few words changed.
    for r in rows[:12]:
        words = r["text"].split(" ")
        for i in range(0, len(words), 97):
            words[i] = words[i].upper()
        docs.append(
            {
                "text": " ".join(words),
                "source": r["source"] + "#rev2",
                "meta": {"note": "near-duplicate revision"},
            }
        )
    hand = [
        ("hand:pii-en", PII_EN),
        ("hand:pii-zh", PII_ZH),
        ("hand:unsafe-en", UNSAFE_EN),
        ("hand:garbled", GARBLED),
        ("hand:log-like", LOG_LIKE),
        ("hand:seo-spam", SEO_SPAM),
        ("hand:empty", ""),
        ("hand:whitespace", "   \n\t  \n"),
    ]
    docs += [{"text": t, "source": s, "meta": {"note": "hand-written hard case"}} for s, t in hand]
    rng.shuffle(docs)
    for i, doc in enumerate(docs):
        doc["id"] = f"prose-{i:05d}"
    return docs


def build_code(corpus: Path, rng: random.Random) -> pa.Table:
    code = _read_jsonl(corpus / "code.jsonl.gz")
    rows = []
    for lang, n in (("python", 130), ("javascript", 60), ("perl", 35), ("c", 25)):
        rows += _pick(code, n, rng, lambda r, lang=lang: r["lang"] == lang)
    return pa.table(
        {
            "id": [f"code-{i:05d}" for i in range(len(rows))],
            "text": [r["text"] for r in rows],
            "source": [r["source"] for r in rows],
            "programming_language": [r["lang"] for r in rows],
        }
    )


BAD_JSONL = (
    b"\n".join(
        [
            b'{"id": "bad-1", "text": "A fine line of English prose that should pass extraction."}',
            b'{"id": "bad-2", "text": "truncated json',
            b'{"id": "bad-3", "text": "invalid utf-8 here: \xff\xfe and more text after it"}',
            b'{"id": "bad-4", "text": "a NUL byte \\u0000 inside the text"}',
            b'{"id": "bad-5", "body": "no text field at all"}',
            b'{"id": "bad-6", "text": ""}',
            b'{"id": "bad-7", "text": 42}',
            b"[1, 2, 3]",
            b"",
        ]
    )
    + b"\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, required=True, help="the development corpus")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    rng = random.Random(SEED)
    (args.out / "web.warc.gz").write_bytes(build_warc(args.corpus, rng))
    prose = build_prose(args.corpus, rng)
    payload = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in prose).encode()
    with (
        open(args.out / "prose.jsonl.gz", "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as handle,
    ):
        handle.write(payload)
    pq.write_table(build_code(args.corpus, rng), args.out / "code.parquet", compression="zstd")
    (args.out / "bad.jsonl").write_bytes(BAD_JSONL)
    for name in ("web.warc.gz", "prose.jsonl.gz", "code.parquet", "bad.jsonl"):
        print(f"{name}: {(args.out / name).stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
