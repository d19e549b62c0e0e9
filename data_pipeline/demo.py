"""The `pipeline` step of `pretrain demo`: tag the embedded sample into a shards artifact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from data_pipeline.config import PipelineConfig
from data_pipeline.stages.registry import registry
from pretrain.command import recorded
from pretrain.demostep import DemoContext

MODEL_STAGES = {"domain": "domain", "quality": "quality", "lm": "perplexity"}
"""build_demo_models() key -> the stage whose `model` setting takes that model artifact."""


def demo_models(raw: Path, out: Path) -> dict[str, Path]:
    """Train the demo's fastText/KenLM models on the embedded sample."""
    from data_pipeline.models.demo_assets import build_demo_models

    return dict(build_demo_models(raw, out))


def demo_config(raw: Path, out: Path, models: dict[str, Path]) -> PipelineConfig:
    """Every stage, with the demo's models, small shards and a bounded runtime."""
    stages: dict[str, dict[str, Any]] = {}
    for name in registry():
        section: dict[str, Any] = {}
        for key, stage in MODEL_STAGES.items():
            if stage == name and key in models:
                section["model"] = str(models[key])
        if name in MODEL_STAGES.values() and "model" not in section:
            continue  # a model stage without its demo model cannot run
        stages[name] = section
    # 10% held out (not the default 0.5%): the demo's ablation decides on its eval documents, and
    # ~9 of them could not support any decision (evals/demo.py).
    return PipelineConfig(
        inputs=(str(raw),),
        output=str(out),
        stages=stages,
        shard_rows=500,
        overwrite=True,
        eval_fraction=0.1,
    )


def step(ctx: DemoContext) -> str:
    """Run the pipeline on ctx.artifacts["raw"] into ctx.out/"shards"; one-line summary."""
    from data_pipeline.runner import run_pipeline

    raw = Path(ctx.artifacts["raw"])
    target = ctx.out / "shards"
    if ctx.reuse(target):
        ctx.artifacts["shards"] = target
        return f"reused {target}"
    models = demo_models(raw, ctx.out / "models")
    config = demo_config(raw, target, models)
    with recorded(["pretrain", "demo"]):
        result = run_pipeline(config)
    ctx.artifacts["shards"] = target
    return (
        f"{result.ledger['documents_in']} docs in, {result.ledger['documents_kept']} kept, "
        f"{result.ledger['documents_dropped']} dropped, {len(result.shards)} shards "
        f"({', '.join(s.name for s in config_stages(config))})"
    )


def config_stages(config: PipelineConfig) -> list[Any]:
    from data_pipeline.runner import build_stages

    return build_stages(config)
