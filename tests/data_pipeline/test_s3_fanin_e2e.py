"""`pretrain data run` with s3:// inputs and output and dedup on, through the dedup exchange's
two-level fan-in (data_pipeline.dedup.fanin): more input parts than fanin.FANIN_FROM, so the map
step's producers are merged in groups before its consumers read them, on a real S3 API (moto in
server mode, recording every request) and from a clean shell:

- the shards, rejects and ledger are byte-identical to the local run of the same input files
  (which takes the same merge step on local files; run in this process, on the session's Ray),
  and dedup found the same clusters;
- every input file's every document is in the ledger and in a shard of its own part;
- the merge really ran on the store: each merge group's object was uploaded and then read.

66 small documents in 3 files, one part per document (shard_rows 1): 66 producers (FANIN_FROM is
64, the product's own, not lowered), merged in 8 groups of up to 9.
"""

from __future__ import annotations

import json
import random
import subprocess
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.dedup import fanin
from data_pipeline.runner import run_pipeline
from tests.data_pipeline.raytools import REPO, clean_env, data_run
from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem
from tests.data_pipeline.test_runner_cluster_s3_out import _local, _objects, _published

FILES, PER_FILE = 3, 22
DOCS = FILES * PER_FILE
EXACT, NEAR = 10, 10


def _corpus() -> dict[str, bytes]:
    """FILES JSONL files of PER_FILE documents: random word texts, EXACT of them repeated
    verbatim and NEAR repeated with one word changed (dedup's clusters), shuffled (seeded)."""
    rng = random.Random(13)
    words = [f"w{i}" for i in range(400)]
    texts = [" ".join(rng.choice(words) for _ in range(80)) for _ in range(DOCS - EXACT - NEAR)]
    texts += texts[:EXACT]
    for text in texts[EXACT : EXACT + NEAR]:
        tokens = text.split()
        tokens[40] = "changed"
        texts.append(" ".join(tokens))
    rng.shuffle(texts)
    return {
        f"part-{f}.jsonl": "".join(json.dumps({"text": t}) + "\n" for t in texts[f::FILES]).encode()
        for f in range(FILES)
    }


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=800)


def _requests(log: Path) -> list[tuple[str, str]]:
    """(method, path) of every request the store recorded."""
    lines = log.read_text().splitlines() if log.exists() else []
    found = []
    for line in filter(str.strip, lines):
        record = json.loads(line)
        found.append((record["method"], record["url"].split("?")[0]))
    return found


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_an_s3_run_through_the_two_level_fanin_matches_the_local_run(
    ray_local, tmp_path, monkeypatch
) -> None:
    corpus = _corpus()
    width = fanin.fanin(DOCS)
    assert width == 9  # the map step's 66 producers take the merge step
    local_in = tmp_path / "in"
    local_in.mkdir()
    for name, data in corpus.items():
        (local_in / name).write_bytes(data)
    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("MOTO_RECORDER_FILEPATH", str(log))  # the server's own environment
    with moto_server() as endpoint:
        s3 = s3_filesystem(endpoint)
        s3.create_dir("crawl")
        s3.create_dir("corpus")
        for name, data in corpus.items():
            with s3.open_output_stream(f"crawl/in/{name}") as handle:
                handle.write(data)
        env = clean_env(tmp_path / "home", **s3_env(endpoint))
        config = {
            "shard_rows": 1,
            "stages": {"extract": {}, "dedup": {}},
            "ray": {"num_cpus": 2, "timeout_s": 300},
        }
        local_config = {**config, "inputs": [str(local_in)], "output": str(tmp_path / "local")}
        # the reference: in this process, on the session's Ray (the s3 run is the one from a
        # clean shell with its own Ray; a second CLI run with its own Ray cost ~24 s)
        run_pipeline(PipelineConfig.model_validate(local_config), progress=False)
        urllib.request.urlopen(f"{endpoint}/moto-api/recorder/start-recording")
        s3_config = {**config, "inputs": ["s3://crawl/in"], "output": "s3://corpus/runs/fan"}
        remote = _run(data_run(s3_config, tmp_path / "s.json"), env)
        assert remote.returncode == 0, remote.stderr[-2000:]
        urllib.request.urlopen(f"{endpoint}/moto-api/recorder/stop-recording")
        stored = _objects(s3, "corpus/runs/fan")
    expected = _published(_local(tmp_path / "local"))
    assert _published(stored) == expected
    assert f"{DOCS} docs in, {DOCS} kept, 0 dropped" in remote.stdout, remote.stdout

    ledger = json.loads(stored["ledger.json"])
    assert ledger["documents_in"] == DOCS and ledger["conservation"]["balanced"]
    assert ledger["parts"] == DOCS and ledger["skipped_files"] == []
    ids = []
    for f in range(FILES):
        for part in range(PER_FILE):
            rows = pq.read_table(pa.BufferReader(stored[f"data/part-{f}-{part:05d}.parquet"]))
            assert rows.num_rows == 1
            ids += rows.column("id").to_pylist()
    lines = [f"part-{f}/part-{f}.jsonl:{n + 1}" for f in range(FILES) for n in range(PER_FILE)]
    assert sorted(ids) == sorted(lines)  # every input's every document, each in its own part

    def dedup_stats(manifest: dict) -> dict:
        (stage,) = [s for s in manifest["stages"] if s["name"] == "dedup"]
        return {k: v for k, v in stage["stats"].items() if k != "extra"}

    found = dedup_stats(json.loads(stored["manifest.json"]))
    assert found == dedup_stats(json.loads((tmp_path / "local" / "manifest.json").read_bytes()))
    assert found["exact_duplicates"] == EXACT and found["dropped"] == EXACT + NEAR

    seen = _requests(log)
    merged = [(m, p) for m, p in seen if "-map/" in p and "/m000000" in p]
    written = {p for m, p in merged if m in ("PUT", "POST")}  # a multipart upload each
    read = {p for m, p in merged if m == "GET"}
    groups = {p.rsplit("/", 2)[-2] for p in written}  # the map step's tables: one file per group
    names = {p.rsplit("/", 1)[1] for p in written}
    assert names == {f"m{k:07d}.arrow" for k in range(-(-DOCS // width))}, sorted(written)[:20]
    assert len(written) == len(groups) * len(names) and len(groups) >= 3, sorted(groups)
    assert read == written, sorted(written - read)[:10]  # the consumers read the merged files
