"""A stage added from outside the repository: a plugin module written to a temporary directory,
registered through its distribution's `pretrain.stages` entry points, runs through the real
`pretrain data run` (a subprocess with a clean environment, its own embedded Ray) without any
project file edited. It holds a map stage that can reject and a global stage (map -> aggregate ->
join over every part); the config sections, the select's clause names, the shards' columns, the
ledger, the manifest (the global stage's own typed section: no field added to
pretrain.artifacts.shards) and resume all come from what the plugin declares."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.stages import registry as stage_registry
from pretrain import shards_layout as layout
from pretrain.artifacts import shards as shards_artifact
from pretrain.errors import ConfigError
from tests.data_pipeline.raytools import REPO, clean_env, data_run

PLUGIN = '''
"""Toy stages: `toylen` (map: characters, rejects short texts), `toyrank` (global: how many
documents of the whole corpus are shorter)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from data_pipeline.stages.base import GlobalStage, Stage, StageConfig, StageSection


class ToyConfig(StageConfig):
    min_chars: int = 1


def chars(table):
    return [len(t or "") for t in table.column("text").to_pylist()]


class ToyLength(Stage):
    name = "toylen"
    order = 55
    columns = (pa.field("toy_chars", pa.int32()), pa.field("toylen_reason", pa.string()))
    tags = ("toy_chars",)  # read downstream by name (tests/tokenizer/test_stage_tags.py)
    Config = ToyConfig

    def __call__(self, batch):
        counts = chars(batch)
        reasons = ["short" if c < self.config.min_chars else None for c in counts]
        return self.append(batch, {"toy_chars": counts, "toylen_reason": reasons})


class ToyRankSection(StageSection):
    documents: int = 0
    longest: int = -1


class ToyRank(GlobalStage):
    name = "toyrank"
    order = 90
    columns = (pa.field("toy_rank", pa.int64()),)
    Section = ToyRankSection

    def __init__(self, config=None, **context):
        super().__init__(config, **context)
        self.documents = 0
        self.longest = -1

    def manifest_section(self):
        return ToyRankSection(documents=self.documents, longest=self.longest)

    def map_part(self, rows):
        return {"chars": pa.table({"chars": pa.array(chars(rows), pa.int64())})}, {}

    def aggregate(self, parts):
        every = [pq.read_table(p.files["chars"]).column("chars").to_numpy() for p in parts]
        ordered = np.sort(np.concatenate(every)) if every else np.zeros(0, np.int64)
        self.documents = int(len(ordered))
        self.longest = int(ordered[-1]) if len(ordered) else -1
        return [(ordered.tolist(),)] * len(parts)

    def join_part(self, rows, outputs, index, ordered):
        ranks = np.searchsorted(np.asarray(ordered), np.asarray(chars(rows)), side="left")
        return self.append(rows, {"toy_rank": ranks.tolist()})

    def describe(self):
        return {**super().describe(), "documents": self.documents}
'''
BROKEN = 'raise ImportError("toy_broken needs libtoy, which is not installed")\n'
ENTRY_POINTS = """[pretrain.stages]
toylen = toy_stages:ToyLength
toyrank = toy_stages:ToyRank
broken = toy_broken:Nope
"""
MIN_CHARS = 60


def _plugin(root: Path) -> Path:
    """A distribution on sys.path: its modules and its dist-info (what `pip install` leaves)."""
    root.mkdir(parents=True)
    (root / "toy_stages.py").write_text(PLUGIN, encoding="utf-8")
    (root / "toy_broken.py").write_text(BROKEN, encoding="utf-8")
    info = root / "toy_stages-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-stages\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def _inputs(path: Path) -> Path:
    """90 documents of 0 to ~400 characters; equal lengths repeat across the two files."""
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "a",
        "lazy",
        "dog",
        "while",
        "seven",
        "birds",
        "sing",
    ]
    path.mkdir()
    for f in range(2):
        with (path / f"in{f}.jsonl").open("w", encoding="utf-8") as handle:
            for i in range(45):
                text = " ".join(words[(i + k) % len(words)] for k in range((i * 7) % 80))
                handle.write(json.dumps({"id": f"d{f}-{i}", "text": text}) + "\n")
    return path


@pytest.fixture()
def plugin_registry(tmp_path, monkeypatch):
    """The registry as a process with the plugin installed sees it (cache cleared around)."""
    monkeypatch.syspath_prepend(str(_plugin(tmp_path / "site")))
    stage_registry.registry.cache_clear()
    yield stage_registry.registry()
    monkeypatch.undo()
    sys.modules.pop("toy_stages", None)
    stage_registry.registry.cache_clear()


def test_a_plugin_stage_takes_its_declared_place(plugin_registry) -> None:
    names = list(plugin_registry)
    assert names.index("rules") < names.index("toylen") < names.index("safety")
    assert names.index("dedup") < names.index("toyrank") and names[-1] == "broken"
    assert stage_registry.schema_for(["extract", "toylen"]).names[-2:] == [
        "toy_chars",
        "toylen_reason",
    ]
    assert stage_registry.stage_class("toyrank").Section.__name__ == "ToyRankSection"
    with pytest.raises(ConfigError, match=r"stages.broken is enabled but .*libtoy"):
        stage_registry.stage_class("broken")


def test_a_plugin_cannot_take_a_built_in_place(plugin_registry, monkeypatch) -> None:
    toy = stage_registry.stage_class("toylen")
    monkeypatch.setattr(toy, "order", stage_registry.stage_class("rules").order)
    stage_registry.registry.cache_clear()
    with pytest.raises(ConfigError, match="same order 50"):
        stage_registry.registry()


def _run(tmp: Path, config: dict, name: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(tmp / "home", PYTHONPATH=str(tmp / "site"))
    return subprocess.run(
        data_run(config, tmp / f"{name}.json"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _files(out: Path) -> dict[str, bytes]:
    paths = [out / layout.LEDGER, *sorted((out / layout.DATA_DIR).glob("*"))]
    paths += sorted((out / layout.REJECTS_DIR).glob("*"))
    return {str(p.relative_to(out)): p.read_bytes() for p in paths}


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_plugin_stage_runs_through_the_real_runner(tmp_path, plugin_registry) -> None:
    out = tmp_path / "out"
    config = {
        "inputs": [str(_inputs(tmp_path / "in"))],
        "output": str(out),
        "shard_rows": 20,
        "stages": {"extract": {}, "toylen": {"min_chars": MIN_CHARS}, "toyrank": {}},
        "select": {"drop": ["extract:*", "toylen:short"]},
        "ray": {"num_cpus": 2, "timeout_s": 500},
    }
    broken = _run(tmp_path, {**config, "stages": {"extract": {}, "broken": {}}}, "broken")
    assert broken.returncode == 2, broken.stderr[-2000:]
    assert "stages.broken is enabled but toy_broken:Nope" in broken.stderr
    assert "libtoy" in broken.stderr

    first = _run(tmp_path, config, "first")
    assert first.returncode == 0, first.stderr[-3000:]
    artifact = shards_artifact.open(out)
    kept = pa.concat_tables(pq.read_table(p) for p in artifact.shard_paths)
    rejects = pa.concat_tables(pq.read_table(p) for p in sorted((out / "_rejects").glob("*.pq")))
    every = kept.to_pylist() + rejects.to_pylist()
    assert len(every) == 90 == artifact.manifest.counts["documents_in"]
    lengths = sorted(len(row["text"] or "") for row in every)
    for row in every:
        chars = len(row["text"] or "")
        assert row["toy_chars"] == chars
        assert row["toy_rank"] == sum(1 for n in lengths if n < chars)  # corpus-wide
    short = [r for r in every if r["extract_reason"] is None and r["toy_chars"] < MIN_CHARS]
    assert short and all(r["toylen_reason"] == "short" for r in short)
    assert sorted(r["id"] for r in short) == sorted(
        r["id"] for r in rejects.to_pylist() if r["reject_reason"] == "toylen:short"
    )
    assert all(r["toy_chars"] >= MIN_CHARS for r in kept.to_pylist())
    ledger = json.loads((out / layout.LEDGER).read_text())
    assert ledger["conservation"]["balanced"] and ledger["documents_kept"] == kept.num_rows
    described = {s["name"]: s for s in artifact.fields.stages}
    assert list(described) == ["extract", "toylen", "toyrank"]
    assert described["toylen"]["config"] == {"enabled": True, "min_chars": MIN_CHARS}
    assert described["toyrank"]["documents"] == 90  # what its aggregate saw, in the driver
    assert artifact.raw["sections"] == {"toyrank": {"documents": 90, "longest": lengths[-1]}}
    typed = stage_registry.section(artifact, "toyrank")  # the plugin's own model, read back
    assert type(typed).__name__ == "ToyRankSection" and typed.longest == lengths[-1]

    before = _files(out)
    second = _run(tmp_path, config, "second")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "(6 of 6 parts reused)" in second.stdout + second.stderr
    assert _files(out) == before
