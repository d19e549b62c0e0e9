"""`pretrain demo`: the main job end to end on the embedded sample.

Each capability adds one step: a function `step(ctx: DemoContext) -> str` in its package's
`demo.py`, listed in DEMO_STEPS (imported, not named by a string, so go-to-definition works). A
step is typed against the Protocol pretrain.demostep.DemoContext (which this module's dataclass
satisfies: mypy checks DEMO_STEPS and `run_demo`), so no package imports this layer. A step
reads the artifacts earlier steps put in `ctx.artifacts`, writes its own under `ctx.out`, and
returns a one-line summary.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from data_pipeline import demo as pipeline_demo
from evals import demo as evals_demo
from mixtures import demo as mixtures_demo
from pretrain import demostep
from pretrain.artifacts import raw as raw_kind
from pretrain.artifacts.base import write_artifact
from pretrain.locking import output_lock
from pretrain.manifest import verify
from pretrain.output_check import refuse_foreign, refuse_not_a_directory, temporary_file
from pretrain.sample import SAMPLE_FILES, sample_dir
from tokenizer import demo as tokenizer_demo
from trainer import demo as trainer_demo


@dataclass
class DemoContext:
    """The demo's state (what pretrain.demostep.DemoContext, the steps' view of it, names)."""

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


def sample_step(ctx: demostep.DemoContext) -> str:
    """Copy the embedded sample into a `raw` artifact so every later artifact has lineage."""
    target = ctx.out / "raw"
    if not ctx.reuse(target):
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name in SAMPLE_FILES:
            shutil.copyfile(sample_dir() / name, target / name)
        write_artifact(
            target,
            raw_kind.RawFields(),
            config={"source": "pretrain.sample"},
            counts={"files": len(SAMPLE_FILES)},
        )
    ctx.artifacts["raw"] = target
    raw = raw_kind.open(target)
    size = raw.total_bytes
    return f"{len(raw.manifest.files)} raw input files, {size / 1e6:.1f} MB -> {target}"


DEMO_STEPS: tuple[tuple[str, demostep.DemoStep], ...] = (
    ("sample", sample_step),
    ("pipeline", pipeline_demo.step),
    ("tokenizer", tokenizer_demo.step),
    ("mixture", mixtures_demo.step),
    ("ablation", evals_demo.ablation_step),
    ("launch", trainer_demo.step),
    ("eval", evals_demo.eval_step),
)


DEMO_MARK = ".pretrain-demo"
"""Written first into a new or empty `--out`: the folder is a demo's, whose steps replace their
sub-folders (`raw/`, `run/`, ...) when those do not verify."""


def check_demo_out(out: Path) -> None:
    """Refuse an `--out` that is a file or a non-empty folder no demo wrote: a step deletes a
    `raw/` or `run/` there that is not a verified artifact (someone else's)."""
    refuse_not_a_directory(out, "--out")
    if (out / DEMO_MARK).is_file():
        return
    refuse_foreign(out, "--out", f"demo output (no {DEMO_MARK})", temporary_file)


def run_demo(out: str | Path, force: bool = False) -> int:
    with output_lock(out):
        ctx = DemoContext(out=Path(out).resolve(), force=force)
        check_demo_out(ctx.out)
        ctx.out.mkdir(parents=True, exist_ok=True)
        (ctx.out / DEMO_MARK).touch()
        total_start = time.perf_counter()
        rows = []
        for name, step in DEMO_STEPS:
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
