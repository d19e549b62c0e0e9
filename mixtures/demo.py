"""Demo step: a mixture from the demo's encoded sample with configs/mixture.yaml, and its report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mixtures.build import build_mixture
from mixtures.recipe import MixtureConfig, resolved_phases
from mixtures.report import write_report
from mixtures.selection import load_sidecars, select_components
from pretrain.config import load_config
from pretrain.errors import ConfigError
from pretrain.manifest import load_manifest

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "mixture.yaml"
SEQ_LENGTH = 128
GLOBAL_BATCH = 8  # the proxy training config's global batch (configs/train_proxy.yaml)
MAX_TOKENS = 400_000
BUDGET_FRACTION = 0.8


def _config(encoded: Path, tokenizer: Path, out: Path, extra: list[str]) -> MixtureConfig:
    overrides = [
        f"build.encoded={encoded}",
        f"build.tokenizer={tokenizer}",
        f"out={out}",
        f"build.seq_length={SEQ_LENGTH}",
        f"build.global_batch={GLOBAL_BATCH}",
        "build.model_params=null",
        *extra,
    ]
    return load_config(MixtureConfig, CONFIG, overrides)


def _by_language_recipe(sidecars: Any) -> str:
    """Fallback when the demo data has no domain tags: one component per language (>= 1 %)."""
    langs = sidecars.table.column("lang").to_numpy(zero_copy_only=False)
    tokens = sidecars.table.column("num_tokens").to_numpy(zero_copy_only=False)
    totals = {str(lang): int(tokens[langs == lang].sum()) for lang in set(langs) if lang}
    keep = sorted(
        (n for n, t in totals.items() if t >= 0.01 * sum(totals.values())), key=lambda n: -totals[n]
    )[:4]
    weights = np.round(
        np.array([totals[n] for n in keep], np.float64) / sum(totals[n] for n in keep), 4
    )
    weights[0] += 1.0 - weights.sum()
    comps = ", ".join(
        f"{{name: {n}, select: {{lang: {n}}}, weight: {w:.4f}, max_epochs: 2}}"
        for n, w in zip(keep, weights, strict=True)
    )
    return f"recipe.components=[{comps}]"


def _budget(config: MixtureConfig, docs: list[np.ndarray]) -> int:
    """A token budget every component can serve within its epoch cap (capped for speed)."""
    phases = resolved_phases(config)
    limits = []
    for k, comp in enumerate(config.recipe.components):
        share = sum(p.share * p.weights[comp.name] for p in phases)
        if share > 0:
            limits.append(int(docs[k]["tokens"].sum()) * comp.max_epochs / share)
    return int(min(MAX_TOKENS, BUDGET_FRACTION * min(limits)))


def step(ctx: Any) -> str:
    """Build `ctx.out/mixture` from ctx.artifacts["encoded"] and ["tokenizer"], report it."""
    encoded, tokenizer = ctx.artifacts["encoded"], ctx.artifacts["tokenizer"]
    out = ctx.out / "mixture"
    sidecars = load_sidecars(encoded, list(load_manifest(encoded)["prefixes"]))
    extra: list[str] = []
    config = _config(encoded, tokenizer, out, extra)
    try:
        docs = select_components(list(config.recipe.components), sidecars)
    except ConfigError:
        extra = [_by_language_recipe(sidecars), "recipe.phases=[]"]
        config = _config(encoded, tokenizer, out, extra)
        docs = select_components(list(config.recipe.components), sidecars)
    config = _config(
        encoded, tokenizer, out, [*extra, f"build.total_tokens={_budget(config, docs)}"]
    )
    if not ctx.reuse(out) or load_manifest(out).get("config") != config.model_dump(mode="json"):
        build_mixture(config, command=["pretrain", "demo"])
    report = write_report(out)
    ctx.artifacts["mixture"] = out
    phases = ", ".join(
        f"{p['name']} {p['num_sequences']} seq x {p['seq_length']}" for p in report["phases"]
    )
    worst = max(p["max_batch_deviation_share"] for p in report["phases"])
    names = ", ".join(c["name"] for c in report["components"])
    return (
        f"{len(report['components'])} components ({names}); {phases}; max per-batch "
        f"deviation {worst:.3f} of a batch (W={GLOBAL_BATCH}) -> {out}"
    )
