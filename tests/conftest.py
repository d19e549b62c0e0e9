"""Shared test fixtures. Every test has a timeout (pyproject) and faulthandler is on.

Ray: one local instance per test session, 2 CPUs, dashboard off, started only by tests that ask
for the `ray_local` fixture.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
# the project hash cache (pretrain.hashcache) of this test session, not the user's
os.environ.setdefault("PRETRAIN_CACHE", tempfile.mkdtemp(prefix="pretrain-cache-"))

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray instance shared by the whole test session (2 CPUs, loopback only)."""
    import ray

    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=512 * 1024 * 1024,
            ignore_reinit_error=True,
        )
    yield ray
    ray.shutdown()


@pytest.fixture
def repo_root() -> Path:
    return REPO
