"""A driver SIGKILLed while the dedup stage maps its parts, or while it aggregates them, and then
re-run: only the unfinished work is done again, and the shards, rejects and ledger are
byte-identical to an uninterrupted run. Each run is `pretrain data run` in a subprocess with a
clean environment and its own embedded Ray (2 CPUs); the killed driver's Ray processes are gone
before anything is counted, so no late write of theirs can move what the test compares."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from data_pipeline.parts import GLOBAL, PARTS, ROWS
from pretrain import shards_layout as layout
from tests.data_pipeline.raytools import DATA, REPO, clean_env, data_run, ray_processes, wait_gone

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.serial]
FILES, COPIES, SHARD_ROWS = 3, 40, 80
"""3 inputs of 40 copies of the 8 fixture documents: 320 docs, 4 parts each, 12 parts."""
PARTS_TOTAL = FILES * (-(-COPIES * 8 // SHARD_ROWS))


def _inputs(directory: Path) -> Path:
    """Real fixture texts, each copy with its own id: every document has exact duplicates."""
    lines = (DATA / "docs.jsonl").read_bytes().splitlines()[:8]
    docs = [json.loads(line) for line in lines]
    directory.mkdir(parents=True)
    for f in range(FILES):
        with (directory / f"in{f}.jsonl").open("w", encoding="utf-8") as handle:
            for i in range(COPIES):
                for doc in docs:
                    handle.write(json.dumps({**doc, "id": f"{doc['id']}-{f}-{i}"}) + "\n")
    return directory


def _config(inputs: Path, out: Path) -> dict:
    return {
        "inputs": [str(inputs)],
        "output": str(out),
        "shard_rows": SHARD_ROWS,
        "batch_rows": 40,
        "stages": {"extract": {}, "langid": {}, "dedup": {}},
        "ray": {"num_cpus": 2, "timeout_s": 600},
    }


def _start(config: dict, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        data_run(config, tmp / f"{name}.yaml"),
        cwd=REPO,
        env=clean_env(tmp / "home"),
        stdout=(tmp / f"{name}.out").open("wb"),
        stderr=subprocess.STDOUT,
    )


def _finish(config: dict, tmp: Path, name: str) -> str:
    run = _start(config, tmp, name)
    assert run.wait(600) == 0, (tmp / f"{name}.out").read_text()[-3000:]
    return (tmp / f"{name}.out").read_text()


def _output(out: Path) -> dict[str, bytes]:
    files = {"ledger.json": (out / "ledger.json").read_bytes()}
    for sub in (layout.DATA_DIR, layout.REJECTS_DIR):
        for path in sorted((out / sub).glob("*")):
            files[f"{sub}/{path.name}"] = path.read_bytes()
    assert any(name.startswith(f"{layout.DATA_DIR}/") for name in files)
    return files


def _records(out: Path) -> dict[str, tuple[int, int]]:
    """Persisted dedup map output of the parts with a record (a killed task may have left the
    files of a part it did not finish): name -> (inode, mtime_ns) of the record and its files."""
    folder = out / PARTS / GLOBAL / "dedup"
    recorded = {path.stem for path in folder.glob("*.json")}
    found = {}
    for path in sorted(folder.glob("*")):
        if path.name.split(".", 1)[0] in recorded:
            stat = path.stat()
            found[path.name] = (stat.st_ino, stat.st_mtime_ns)
    return found


def _record_count(out: Path) -> int:
    return len(list((out / PARTS / GLOBAL / "dedup").glob("*.json")))


def _kill_when(config: dict, tmp: Path, ready) -> int:
    """Start a driver, SIGKILL it once `ready(out)` holds; wait until every Ray process it
    started is gone. Returns the record count seen just before the kill."""
    out = Path(config["output"])
    run = _start(config, tmp, "killed")
    driver = psutil.Process(run.pid)
    procs: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 600
    seen = -1
    while time.monotonic() < deadline and run.poll() is None:
        procs.update({p.pid: p for p in ray_processes(driver)})
        if ready(out):
            seen = _record_count(out)
            break
        time.sleep(0.01)
    assert run.poll() is None, "the job ended before it could be killed"
    procs.update({p.pid: p for p in ray_processes(driver)})
    run.send_signal(signal.SIGKILL)
    run.wait(30)
    wait_gone(list(procs.values()), 30.0)  # ends any left after 30 s: nothing writes after this
    assert not (out / "manifest.json").exists()
    return seen


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    tmp = tmp_path_factory.mktemp("reference")
    inputs = _inputs(tmp / "inputs")
    config = _config(inputs, tmp / "out")
    _finish(config, tmp, "reference")
    assert _record_count(tmp / "out") == PARTS_TOTAL
    return inputs, _output(tmp / "out")


def _rerun_after_kill(reference, tmp: Path, ready) -> tuple[int, dict, str]:
    inputs, expected = reference
    config = _config(inputs, tmp / "out")
    seen = _kill_when(config, tmp, ready)
    before = _records(tmp / "out")
    said = _finish(config, tmp, "rerun")
    after = _records(tmp / "out")
    assert _output(tmp / "out") == expected  # shards, rejects and ledger, byte for byte
    return seen, {name: after.get(name) == stamp for name, stamp in before.items()}, said


def test_driver_killed_while_dedup_maps_its_parts(reference, tmp_path) -> None:
    seen, kept, said = _rerun_after_kill(reference, tmp_path, lambda out: _record_count(out) > 0)
    assert 0 < seen < PARTS_TOTAL  # killed with parts still to map
    records = [name for name in kept if name.endswith(".json")]
    assert records and all(kept.values())  # every part mapped before the kill was reused as is
    assert f"dedup map output reused for {len(records)} of {PARTS_TOTAL} parts" in said


def _aggregating(out: Path) -> bool:
    pieces = out / PARTS / ROWS
    joined = pieces.is_dir() and any(pieces.rglob("*.parquet"))
    return _record_count(out) == PARTS_TOTAL and not joined


def test_driver_killed_while_dedup_aggregates(reference, tmp_path) -> None:
    seen, kept, said = _rerun_after_kill(reference, tmp_path, _aggregating)
    assert seen == PARTS_TOTAL  # every part was mapped, no part joined yet: the aggregation ran
    assert all(kept.values())  # no part was mapped again
    assert f"dedup map output reused for {PARTS_TOTAL} of {PARTS_TOTAL} parts" in said
