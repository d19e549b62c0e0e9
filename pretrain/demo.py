"""`pretrain demo`: the main job end to end on the embedded sample.

Each capability adds one step: a function `step(ctx: DemoContext) -> str` in its package's
`demo.py`, listed in DEMO_STEPS. A step reads the artifacts earlier steps put in `ctx.artifacts`,
writes its own under `ctx.out`, and returns a one-line summary.
"""

from __future__ import annotations

import importlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from pretrain.locking import writes_output
from pretrain.manifest import load_manifest, verify, write_manifest

DEMO_STEPS: tuple[tuple[str, str], ...] = (
    ("sample", "pretrain.demo:sample_step"),
    ("pipeline", "data_pipeline.demo:step"),
    ("tokenizer", "tokenizer.demo:step"),
    ("mixture", "mixtures.demo:step"),
    ("ablation", "evals.demo:ablation_step"),
    ("launch", "trainer.demo:step"),
    ("eval", "evals.demo:eval_step"),
)


@dataclass
class DemoContext:
    out: Path
    force: bool = False
    artifacts: dict[str, Path] = field(default_factory=dict)

    def reuse(self, directory: Path) -> bool:
        """True when `directory` is a verified artifact from an earlier demo run (and not --force)."""
        if self.force or not (directory / "manifest.json").is_file():
            return False
        try:
            verify(directory)
        except Exception:
            return False
        return True


def sample_dir() -> Path:
    return Path(str(resources.files("pretrain.sample")))


SAMPLE_FILES = ("web.warc.gz", "prose.jsonl.gz", "code.parquet", "bad.jsonl")


def sample_step(ctx: DemoContext) -> str:
    """Copy the embedded sample into a `raw` artifact so every later artifact has lineage."""
    target = ctx.out / "raw"
    if not ctx.reuse(target):
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name in SAMPLE_FILES:
            shutil.copyfile(sample_dir() / name, target / name)
        write_manifest(
            target, "raw", config={"source": "pretrain.sample"}, counts={"files": len(SAMPLE_FILES)}
        )
    ctx.artifacts["raw"] = target
    manifest = load_manifest(target)
    size = sum(f["bytes"] for f in manifest["files"].values())
    return f"{len(manifest['files'])} raw input files, {size / 1e6:.1f} MB -> {target}"


def _load_step(ref: str) -> Callable[[DemoContext], str]:
    module_name, _, func_name = ref.partition(":")
    return getattr(importlib.import_module(module_name), func_name)


@writes_output("out")
def run_demo(out: str | Path, force: bool = False) -> int:
    ctx = DemoContext(out=Path(out).resolve(), force=force)
    ctx.out.mkdir(parents=True, exist_ok=True)
    total_start = time.perf_counter()
    rows = []
    for name, ref in DEMO_STEPS:
        step = _load_step(ref)
        print(f"[demo] {name:<10} running ...", flush=True)
        start = time.perf_counter()
        summary = step(ctx)
        elapsed = time.perf_counter() - start
        rows.append((name, summary, elapsed))
        print(f"[demo] {name:<10} done in {elapsed:.1f} s: {summary}", flush=True)
    print("\nSummary")
    for name, summary, elapsed in rows:
        print(f"  {name:<10} {elapsed:7.1f} s  {summary}")
    print(f"  {'total':<10} {time.perf_counter() - total_start:7.1f} s")
    for name, path in ctx.artifacts.items():
        print(f"  artifact {name:<12} {path}")
    return 0
