"""Fixtures shared by the data pipeline tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.data_pipeline.s3tools import moto_server


@pytest.fixture
def s3_server() -> Iterator[str]:
    """The endpoint URL of a real S3-compatible server (moto in server mode) for one test."""
    with moto_server() as endpoint:
        yield endpoint
