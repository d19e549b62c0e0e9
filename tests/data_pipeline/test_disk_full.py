"""A disk that fills up mid-run (here a file-size limit, RLIMIT_FSIZE, on the driver, which
refuses a write past it as a full disk does: EFBIG, or ENOSPC on a real disk): one line, exit 2,
no torn file where a reader looks, and the same command run again with room finishes with the
bytes of an uninterrupted run. Only the limited run is a process of its own (the limit is its);
the reference run, the run again and `pretrain verify` run in this process, on its Ray."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain import shards_layout as layout
from pretrain.manifest import MANIFEST
from pretrain_app.cli import main
from tests.conftest import clean_env

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "data_pipeline"


def _run_limited(config: Path, address: str, limit: int) -> subprocess.CompletedProcess[str]:
    def limited() -> None:  # in the child only: the test process writes as it likes
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "pretrain_app", "data", "run", str(config)]
        + ["--ray-address", address],
        cwd=REPO,
        # No bytecode cache under the limit: Python renames a .pyc cut short by it into place
        # (a short write is no error to it), and every later import of that module then fails.
        env={**clean_env(), "PYTHONDONTWRITEBYTECODE": "1"},
        preexec_fn=limited,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )


def _outputs(out: Path) -> dict[str, bytes]:
    paths = [out / layout.LEDGER, *sorted((out / layout.DATA_DIR).glob("*"))]
    paths += sorted((out / layout.REJECTS_DIR).glob("*"))
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in paths}


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_disk_full_mid_run_is_one_line_and_the_rerun_finishes(ray_local, tmp_path) -> None:
    address = ray_local.get_runtime_context().gcs_address
    stages = {"extract": {}, "langid": {}}
    configs = {}
    for name in ("reference", "out"):
        configs[name] = tmp_path / f"{name}.yaml"
        body = {"inputs": [str(DATA)], "output": str(tmp_path / name), "shard_rows": 4}
        configs[name].write_text(json.dumps({**body, "batch_rows": 3, "stages": stages}))
    assert main(["data", "run", str(configs["reference"]), "-q"]) == 0
    reference = tmp_path / "reference"
    ledger = (reference / layout.LEDGER).stat().st_size
    limit = ledger - 1  # the ledger, written last, cannot fit; an earlier write may fail first

    full = _run_limited(configs["out"], address, limit)
    out = tmp_path / "out"
    assert full.returncode == 2, full.stderr[-3000:]
    assert "Traceback" not in full.stderr, full.stderr[-3000:]
    lines = full.stderr.strip().splitlines()  # the lines before the error are progress
    ours = [i for i, line in enumerate(lines) if line.startswith("pretrain data run: error:")]
    assert len(ours) == 1, full.stderr[-3000:]
    err = lines[ours[0]]
    assert err.startswith("pretrain data run: error: File too large"), full.stderr[-3000:]
    # after it, only Ray's C++ core may say (at exit) that it could not flush its own log file
    assert all(line.startswith("[*** LOG ERROR") for line in lines[ours[0] + 1 :]), lines
    assert "run the same command again" in err  # (the first write past the limit may be Ray's)
    assert not (out / MANIFEST).exists()  # no artifact claims to be finished
    if (out / layout.LEDGER).exists():  # never torn: an earlier whole ledger or none
        json.loads((out / layout.LEDGER).read_bytes())

    assert main(["data", "run", str(configs["out"]), "-q"]) == 0
    assert _outputs(out) == _outputs(reference)
    assert main(["verify", str(out)]) == 0
