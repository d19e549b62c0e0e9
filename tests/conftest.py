"""Shared test fixtures. Every test has a timeout (pyproject) and faulthandler is on.

Ray: one local instance per test session, 2 CPUs, dashboard off, started only by tests that ask
for the `ray_local` fixture.

`clean_demos`: two `pretrain demo` runs from clean (each its own process, clean environment, own
output directory), made once per session for the slow tests that compare them (the ablation's
decision: tests/evals/test_demo_stable.py; the locked tokenizer: tests/tokenizer/
test_demo_tokenizer_id.py), so the ~2 minutes a demo takes are spent twice, not four times.
"""

from __future__ import annotations

import os
import subprocess
import sys
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
    """A local Ray instance shared by the whole test session (2 CPUs). A plain `ray.init()`, so
    NOT loopback-only (its node address is the machine's; tests/data_pipeline/raytools.py's
    `start_node` says why): tests drive other processes to it by its GCS address, which a
    loopback-only Ray would need them to reach with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0. A job's
    own local Ray (pretrain.rayinit.connect) is loopback-only."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local",  # not a `ray start` head another process left on this machine
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


def clean_env() -> dict[str, str]:
    """This environment without what an earlier `ray.init()` or a PRETRAIN_* setting left."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PRETRAIN_"))}


@pytest.fixture(scope="session")
def clean_demos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The output directories of two `pretrain demo` runs from clean (see the module docstring)."""
    root = tmp_path_factory.mktemp("clean-demos")
    outs = (root / "a", root / "b")
    for out in outs:
        proc = subprocess.run(
            [sys.executable, "-m", "pretrain_app", "demo", "--out", str(out)],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=2400,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return outs


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """The sample's files (raw/) and the demo's models trained on all of them (fastText domain
    and quality, KenLM): (raw, models). Trained once per session (~20 s) for every test that
    needs them (test_classify_demo, test_artifact_writers, test_killsweep,
    test_runner_cluster_nodes); a test must not change them."""
    import shutil

    from data_pipeline.models.demo_assets import build_demo_models
    from pretrain.sample import SAMPLE_FILES, sample_dir

    base = tmp_path_factory.mktemp("demo-models")
    raw = base / "raw"
    raw.mkdir()
    for name in SAMPLE_FILES:
        shutil.copyfile(sample_dir() / name, raw / name)
    return raw, build_demo_models(raw, base / "models")
