"""An `s3://` input rewritten in the same second at the same size is a changed input on resume.

The store's Last-Modified counts whole seconds, and above FULL_HASH_BYTES only the first and last
EDGE_BYTES are hashed: a rewrite with a change in the middle, within the second of the upload the
last run recorded, left size, mtime and edges equal, and its stale parts were reused. The
object's ETag (which the store changes with every write of other bytes) is in the identity now.
A real S3-compatible server (moto), objects written as a user's tools would; its clock is stopped
for the inputs' bucket (tests/data_pipeline/moto_clock.py), so the two writes always land in one
second of the store's clock, at any load (on moto's running clock they cross a second boundary
at random)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest

from data_pipeline.fingerprint import FULL_HASH_BYTES, changed_inputs, input_identities
from data_pipeline.formats import InputFile
from tests.data_pipeline.moto_clock import FROZEN
from tests.data_pipeline.s3tools import moto_server_frozen, s3_env, s3_filesystem

pytestmark = pytest.mark.timeout(180)

URI = "s3://crawl/in/big.jsonl"
FROZEN_NS = int(FROZEN.replace(tzinfo=datetime.UTC).timestamp()) * 10**9


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server_frozen("crawl") as url:
        s3_filesystem(url).create_dir("crawl")
        yield url


@pytest.fixture
def store(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in s3_env(endpoint).items():
        monkeypatch.setenv(name, value)
    return endpoint


def _upload(endpoint: str, data: bytes, uri: str = URI) -> int:
    """Write the object; its Last-Modified (whole seconds) as the store reports it."""
    s3 = s3_filesystem(endpoint)
    with s3.open_output_stream(uri.removeprefix("s3://")) as handle:
        handle.write(data)
    return s3.get_file_info(uri.removeprefix("s3://")).mtime_ns


def _big() -> bytes:
    line = b'{"text": "the mill by the river ' + b"turns " * 40 + b'"}\n'
    return line * (2 * FULL_HASH_BYTES // len(line))


def _inputs() -> list[InputFile]:
    return [InputFile(path=URI, format="jsonl", stem="big")]


def test_an_object_rewritten_in_the_same_second_at_the_same_size_is_changed(store: str) -> None:
    original = _big()
    edited = bytearray(original)
    edited[len(edited) // 2] ^= 1  # outside the hashed edges
    first = _upload(store, original)
    recorded = input_identities(_inputs())
    assert _upload(store, bytes(edited)) == first == FROZEN_NS  # the store's stopped clock
    current = input_identities(_inputs())
    assert {k: current["big"][k] for k in ("size", "mtime_ns", "edges_sha256")} == {
        k: recorded["big"][k] for k in ("size", "mtime_ns", "edges_sha256")
    }  # what the identity held before: all equal
    assert changed_inputs(recorded, current) == ["big"]


def test_an_object_left_alone_is_unchanged(store: str) -> None:
    _upload(store, _big())
    recorded = input_identities(_inputs())
    assert changed_inputs(recorded, input_identities(_inputs())) == []
