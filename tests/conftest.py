"""Shared test fixtures. Every test has a timeout (pyproject) and faulthandler is on.

Ray: one local instance per test session, 2 CPUs, dashboard off, started only by tests that ask
for the `ray_local` fixture.

Order: longest file first, by its tests' declared `timeout` (their hang guard), so that a parallel run
(`make test` and `make test-slow`: pytest-xdist `--dist worksteal`) does not end on one long test.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
# the project hash cache (pretrain.hashcache) of this test session, not the user's
os.environ.setdefault("PRETRAIN_CACHE", tempfile.mkdtemp(prefix="pretrain-cache-"))

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def declared(item: pytest.Item) -> float:
        mark = item.get_closest_marker("timeout")
        return float(mark.args[0]) if mark and mark.args else 0.0

    longest: dict[str, float] = {}  # per file, so a file's tests (and its fixtures) stay together
    for item in items:
        longest[item.path] = max(longest.get(item.path, 0.0), declared(item))
    items.sort(key=lambda item: longest[item.path], reverse=True)  # stable


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


BUILT = "PRETRAIN_TEST_BUILT"
"""A folder for `built_once` shared by several pytest runs of the same checkout (`make test-slow`:
its parallel and its serial run), made and removed by their caller; unset: this run's temp root."""


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> Path:
    """A folder that `build(folder)` fills once per test run, not once per pytest-xdist worker
    (and once for every run given the same `BUILT` folder): the first worker to ask builds it
    under a file lock, beside the workers' own temp roots; the others wait for it and read the
    same files. For session fixtures that train or run something
    (models, a data job, a reference training run); a test must not change what is in it. A build
    that fails leaves no folder behind, so the next asker builds again (and fails the same way)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # .../pytest-N, the parent of every worker's popen-gwK
    root = Path(os.environ.get(BUILT, root))
    folder, done = root / f"built-{name}", root / f"built-{name}.done"
    with FileLock(root / f"built-{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """The sample's files (raw/) and the demo's models trained on all of them (fastText domain
    and quality, KenLM): (raw, models). Trained once per test run (~20 s) for every test that
    needs them (test_classify_demo, test_artifact_writers, test_killsweep,
    test_runner_cluster_nodes); a test must not change them."""
    from tests.sample_models import build_demo_models

    def build(base: Path) -> None:
        from pretrain.sample import SAMPLE_FILES, sample_dir

        (base / "raw").mkdir()
        for name in SAMPLE_FILES:
            shutil.copyfile(sample_dir() / name, base / "raw" / name)
        build_demo_models(base / "raw", base / "models")

    base = built_once(tmp_path_factory, "demo-models", build)
    return base / "raw", build_demo_models(base / "raw", base / "models")  # verified, reused
