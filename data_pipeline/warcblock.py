"""What a WARC record's block says of its own length: its digests and its HTTP message's framing
(`data_pipeline.warcframe` asks when a block's end is in doubt)."""

from __future__ import annotations

import base64
import hashlib
import re

HEADER_LIMIT = 1 << 20
"""WARC headers longer than this (no blank line in the first MiB) are a malformed record."""
HEADER_END = re.compile(rb"\r?\n\r?\n")
CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*([0-9]{1,18})[ \t]*\r?$")
_BLOCK_DIGEST = re.compile(rb"(?im)^warc-block-digest:[ \t]*sha-?1:([A-Za-z0-9]+)[ \t]*\r?$")
_PAYLOAD_DIGEST = re.compile(rb"(?im)^warc-payload-digest:[ \t]*sha-?1:([A-Za-z0-9]+)[ \t]*\r?$")
_HTTP_HEAD = re.compile(rb"HTTP/[0-9.]+ [0-9]{3}[^\r\n]*\r?\n")
_CHUNKED = re.compile(rb"(?im)^transfer-encoding:[^\r\n]*chunked")
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r?\n")


def digest_verdict(head: bytes, block: memoryview) -> bool | None:
    """Whether the block matches the first digest the headers `head` declare: its
    WARC-Block-Digest, else its WARC-Payload-Digest (of the HTTP body); None: no digest to
    check (sha1 only)."""
    for pattern, payload in ((_BLOCK_DIGEST, 0), (_PAYLOAD_DIGEST, http_end(block))):
        if (declared := pattern.search(head)) is not None and payload is not None:
            return _sha1_is(declared.group(1), block[payload:])
    return None


def _sha1_is(declared: bytes, data: memoryview) -> bool:
    """Whether `declared` (base32 or hex) is the sha1 of `data`."""
    digest = hashlib.sha1(data).digest()
    return declared.upper() in (base64.b32encode(digest), digest.hex().upper().encode())


def http_end(block: memoryview) -> int | None:
    """Where an HTTP message's headers end in `block` (None: it holds no HTTP message)."""
    if _HTTP_HEAD.match(block) is None:
        return None
    end = HEADER_END.search(block, 0, HEADER_LIMIT)
    return None if end is None else end.end()


def message_end(block: memoryview, limit: int) -> int | None:
    """Where the HTTP message in `block` ends by its own framing: its headers' Content-Length,
    or the last chunk of a chunked body (None: no HTTP message, no length, or past `limit`)."""
    start = http_end(block)
    if start is None:
        return None
    headers = bytes(block[:start])
    if _CHUNKED.search(headers) is None:
        found = CONTENT_LENGTH.search(headers)
        end = None if found is None else start + int(found.group(1))
        return end if end is not None and end <= limit else None
    at = start
    while (line := _CHUNK_LINE.match(block, at)) is not None:
        size, at = int(line.group(1), 16), line.end()
        if size == 0:  # the last chunk: then trailer fields, up to a blank line
            trailer = HEADER_END.search(b"\r\n" + bytes(block[at : at + 4096]))
            return None if trailer is None else at + trailer.end() - 2
        at += size
        if block[at : at + 2] == b"\r\n":
            at += 2
        elif block[at : at + 1] == b"\n":
            at += 1
        else:
            return None
    return None
