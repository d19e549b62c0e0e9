"""Extract stage: raw records (batcher.RAW_SCHEMA) -> main text with boilerplate removed.

HTML is decoded (declared charset, else strict UTF-8, else charset-normalizer's guess), capped in
size BEFORE parsing, and extracted by resiliparse (fast, default) or Trafilatura in a killable
child process under a per-document CPU-time limit (data_pipeline.timelimit), so pathological HTML
(100,000 nested <div>s cost resiliparse minutes in one C call) cannot stall a worker. Records that yield nothing usable get an
`extract_reason`; the job's select drops them (hard rejects) and the ledger counts them.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from typing import ClassVar, Literal

import pyarrow as pa
from pydantic import Field

from data_pipeline.stages.base import Stage, StageConfig
from data_pipeline.timelimit import DocumentFailed, DocumentWorker, TimeLimitExceeded
from pretrain.config import MAX_TIMEOUT_S

_HTML_TYPES = ("text/html", "application/xhtml", "application/xml", "text/xml")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_CHARSET_ALIASES = {
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "iso-8859-1": "cp1252",
    "latin-1": "cp1252",
    "ascii": "cp1252",
    "us-ascii": "cp1252",
}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+")
_BLANK_LINES = re.compile(r"\n{3,}")


class ExtractConfig(StageConfig):
    extractor: Literal["resiliparse", "trafilatura"] = "resiliparse"
    """HTML main-text extractor: resiliparse (fast) or Trafilatura (the FineWeb choice)."""
    max_input_bytes: int = Field(5_000_000, gt=0)
    """Records larger than this (raw HTML or text bytes) are rejected as too_large, unparsed. The
    readers apply it too (a JSON line may be 8 times it), so such a record is read past, never
    held whole: a compression bomb costs a worker no memory. A Parquet row whose text is over
    it, or whose cells total over 8 times it, is a too_large reject too. A WARC record whose
    block (its Content-Length) is over 2 times it is a record_too_large reject, read past
    unparsed (data_pipeline.warc.WARC_RECORD_FACTOR).
    Times `batch_rows`, it bounds what one batch may hold (PipelineConfig.batch_rows)."""
    timeout_s: float = Field(5.0, gt=0, le=MAX_TIMEOUT_S)
    """Per-document extraction limit in CPU-seconds of the extracting process (not wall time, so
    machine load and worker count cannot change which documents hit it); a document that uses
    more is stopped (its process killed, whatever it is doing), rejected as `timeout` and counted
    in the ledger."""
    min_chars: int = Field(1, ge=1)
    """Text shorter than this after cleaning is rejected as empty."""
    favor_precision: bool = True
    """Trafilatura only: prefer less text over boilerplate."""


def _declared_charset(content_type: str | None, payload: bytes) -> str | None:
    match = re.search(r"charset\s*=\s*[\"']?([A-Za-z0-9_.:-]+)", content_type or "", re.I)
    name = match.group(1) if match else None
    if name is None and (meta := _META_CHARSET.search(payload[:4096])):
        name = meta.group(1).decode("ascii", "ignore")
    if not name:
        return None
    name = _CHARSET_ALIASES.get(name.lower(), name.lower())
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def decode_html(payload: bytes, content_type: str | None = None) -> str | None:
    """Bytes -> str: declared charset (HTTP header or <meta>), else UTF-8, else a detected one."""
    declared = _declared_charset(content_type, payload)
    if declared is not None:
        return payload.decode(declared, errors="replace")
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(payload[:200_000]).best()
    if best is None:
        return None
    return payload.decode(best.encoding, errors="replace")


def clean_text_counted(text: str) -> tuple[str, int]:
    """Normalise newlines, trim blank runs and ends, and replace each run of NUL and other
    control characters by one space, so words they separated stay apart ("a\x00b" -> "a b");
    a run next to whitespace or at an end is dropped (no double spaces). Returns the text and
    the number of control characters replaced or dropped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    changed = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal changed
        changed += match.end() - match.start()
        before = text[match.start() - 1] if match.start() else " "
        after = text[match.end()] if match.end() < len(text) else " "
        return "" if before.isspace() or after.isspace() else " "

    text = _CONTROL.sub(replace, text)
    return _BLANK_LINES.sub("\n\n", text).strip(), changed


def _resiliparse(html: str) -> str:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(html)
    return extract_plain_text(
        tree, main_content=True, alt_texts=False, links=False, list_bullets=True, noscript=False
    )


def _trafilatura(favor_precision: bool) -> Callable[[str], str]:
    import trafilatura

    def extract(html: str) -> str:
        return (
            trafilatura.extract(
                html,
                include_comments=False,
                include_tables=True,
                favor_precision=favor_precision,
                deduplicate=False,
                with_metadata=False,
            )
            or ""
        )

    return extract


def extractor(name: str, favor_precision: bool) -> Callable[[str], str]:
    """HTML -> main text with the named library (what the document worker runs)."""
    return _resiliparse if name == "resiliparse" else _trafilatura(favor_precision)


def _is_html(content_type: str) -> bool:
    base = content_type.split(";", 1)[0].strip().lower()
    return not base or base.startswith(_HTML_TYPES)


class ExtractStage(Stage):
    """Raw record -> `text` (+ `extract_reason`, `extractor`, `num_bytes` of the UTF-8 text,
    `control_chars`: control characters cleaning replaced or dropped)."""

    name: ClassVar[str] = "extract"
    order: ClassVar[int] = 10
    columns: ClassVar[tuple[pa.Field, ...]] = (
        pa.field("extract_reason", pa.string()),
        pa.field("extractor", pa.string()),
        pa.field("num_bytes", pa.int64()),
        pa.field("control_chars", pa.int32()),  # control characters cleaning replaced or dropped
    )
    required: ClassVar[str] = "it turns raw records into text for every other stage"
    version: ClassVar[int] = 2  # 2: control characters become a space instead of vanishing
    Config: ClassVar[type[StageConfig]] = ExtractConfig
    config: ExtractConfig

    def setup(self) -> None:
        config = self.config
        self._extract = DocumentWorker(
            extractor, config.extractor, config.favor_precision, seconds=config.timeout_s
        )

    def record_limit(self) -> int | None:
        return self.config.max_input_bytes

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not hasattr(self, "_extract"):
            self.setup()
        texts, reasons, extractors, controls = [], [], [], []
        columns = [
            batch.column(n).to_pylist()
            for n in ("text", "_payload", "_content_type", "_read_reason")
        ]
        for text, payload, content_type, read_reason in zip(*columns, strict=True):
            self._changed = 0
            if read_reason is not None:
                result, reason, extractor = None, read_reason, None
            elif payload is not None:
                result, reason, extractor = self._from_html(payload, content_type)
            else:
                result, reason, extractor = self._from_text(text)
            texts.append(result)
            reasons.append(reason)
            extractors.append(extractor)
            controls.append(self._changed if result is not None else 0)
        num_bytes = [len(t.encode("utf-8")) if t is not None else 0 for t in texts]
        keep = [
            n
            for n in batch.column_names
            if n not in ("text", "_payload", "_content_type", "_read_reason")
        ]
        out = batch.select(keep)
        out = out.add_column(1, pa.field("text", pa.string()), pa.array(texts, pa.string()))
        return self.append(
            out,
            {
                "extract_reason": reasons,
                "extractor": extractors,
                "num_bytes": num_bytes,
                "control_chars": controls,
            },
        )

    def _clean(self, text: str) -> str:
        cleaned, self._changed = clean_text_counted(text)
        return cleaned

    def _from_text(self, text: str | None) -> tuple[str | None, str | None, str | None]:
        config = self.config
        if text is None:
            return None, "missing_text", None
        if (
            len(text) > config.max_input_bytes // 4
            and len(text.encode("utf-8")) > config.max_input_bytes
        ):
            return None, "too_large", "text"
        cleaned = self._clean(text)
        if len(cleaned) < config.min_chars:
            return None, "empty", "text"
        return cleaned, None, "text"

    def _from_html(
        self,
        payload: bytes,
        content_type: str | None,
    ) -> tuple[str | None, str | None, str | None]:
        config = self.config
        if content_type and content_type.split(";", 1)[0].strip().lower() == "text/plain":
            text = decode_html(payload, content_type)
            return self._from_text(text) if text is not None else (None, "undecodable", None)
        if not _is_html(content_type or "") or b"\x00\x00\x00" in payload[:4096]:
            return None, "not_text", None
        if len(payload) > config.max_input_bytes:
            return None, "too_large", config.extractor
        html = decode_html(payload, content_type)
        if html is None:
            return None, "undecodable", None
        try:
            text = self._extract(html)
        except TimeLimitExceeded:
            return None, "timeout", config.extractor
        except DocumentFailed:  # any parser failure on one document is that document's reject
            return None, "extraction_failed", config.extractor
        cleaned = self._clean(text or "")
        if len(cleaned) < config.min_chars:
            return None, "empty", config.extractor
        return cleaned, None, config.extractor
