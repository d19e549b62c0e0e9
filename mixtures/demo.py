"""Demo step: a mixture from the demo's encoded sample with configs/mixture.yaml, and its report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mixtures.build import build_mixture
from mixtures.recipe import MixtureConfig, resolved_phases
from mixtures.report import write_report
from mixtures.selection import Sidecars, component_mask, load_sidecars, select_components
from pretrain.artifacts import encoded as encoded_kind
from pretrain.artifacts import mixture as mixture_kind
from pretrain.command import recorded
from pretrain.config import apply_overrides, parse_config, read_yaml
from pretrain.demostep import DemoContext
from pretrain.errors import ConfigError

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "mixture.yaml"
SEQ_LENGTH = 128
GLOBAL_BATCH = 8  # the proxy training config's global batch (configs/train_proxy.yaml)
MAX_TOKENS = 400_000
BUDGET_FRACTION = 0.8


def _config(
    encoded: Path,
    tokenizer: Path,
    out: Path,
    recipe: dict | None = None,
    total_tokens: int | None = None,
) -> MixtureConfig:
    overrides = [
        f"build.encoded={encoded}",
        f"build.tokenizer={tokenizer}",
        f"out={out}",
        f"build.seq_length={SEQ_LENGTH}",
        f"build.global_batch={GLOBAL_BATCH}",
        "build.model_params=null",
    ]
    if total_tokens is not None:
        overrides.append(f"build.total_tokens={total_tokens}")
    data = apply_overrides(read_yaml(CONFIG), overrides)
    if recipe is not None:
        data["recipe"] = recipe
    return parse_config(MixtureConfig, data, source=str(CONFIG))


def _servable(config: MixtureConfig, sidecars: Sidecars) -> dict[str, Any]:
    """The config's recipe without the components the demo data cannot serve (weights rescaled);
    one component per language when none is left (e.g. no domain tags in the demo data)."""
    recipe = config.recipe.model_dump(mode="json")
    keep = []
    for k, component in enumerate(config.recipe.components):
        try:
            component_mask(component, sidecars, f"recipe.components[{k}].select")
            keep.append(recipe["components"][k])
        except ConfigError:
            continue
    if not keep:
        return _by_language_recipe(sidecars)
    names = {c["name"] for c in keep}
    recipe["components"] = _rescaled(keep)
    for phase in recipe["phases"]:
        if phase.get("weights"):
            weights = {n: w for n, w in phase["weights"].items() if n in names}
            total = sum(weights.values())
            phase["weights"] = {n: w / total for n, w in weights.items()} if total else None
    return recipe


def _rescaled(components: list[dict]) -> list[dict]:
    total = sum(c["weight"] for c in components)
    return [{**c, "weight": c["weight"] / total} for c in components]


def _by_language_recipe(sidecars: Sidecars) -> dict[str, Any]:
    """One component per language holding >= 1 % of the tokens (at most 4)."""
    langs = sidecars.table.column("lang").to_numpy(zero_copy_only=False)
    tokens = sidecars.table.column("num_tokens").to_numpy(zero_copy_only=False)
    totals = {str(lang): int(tokens[langs == lang].sum()) for lang in set(langs) if lang}
    keep = sorted(
        (n for n, t in totals.items() if t >= 0.01 * sum(totals.values())), key=lambda n: -totals[n]
    )[:4]
    comps = [
        {"name": n, "select": {"lang": n}, "weight": float(totals[n]), "max_epochs": 2}
        for n in keep
    ]
    return {"name": "demo-by-language", "components": _rescaled(comps), "phases": []}


def _budget(config: MixtureConfig, docs: list[np.ndarray]) -> int:
    """A token budget every component can serve within its epoch cap (capped for speed)."""
    phases = resolved_phases(config)
    limits = []
    for k, comp in enumerate(config.recipe.components):
        share = sum(p.share * p.weights[comp.name] for p in phases)
        if share > 0:
            limits.append(int(docs[k]["tokens"].sum()) * comp.max_epochs / share)
    return int(min(MAX_TOKENS, BUDGET_FRACTION * min(limits)))


def step(ctx: DemoContext) -> str:
    """Build `ctx.out/mixture` from ctx.artifacts["encoded"] and ["tokenizer"], report it."""
    encoded, tokenizer = ctx.artifacts["encoded"], ctx.artifacts["tokenizer"]
    out = ctx.out / "mixture"
    sidecars = load_sidecars(encoded, encoded_kind.open(encoded).fields.prefixes)
    recipe = _servable(_config(encoded, tokenizer, out), sidecars)
    config = _config(encoded, tokenizer, out, recipe)
    docs = select_components(list(config.recipe.components), sidecars)
    config = _config(encoded, tokenizer, out, recipe, _budget(config, docs))
    if not ctx.reuse(out) or mixture_kind.open(out).manifest.config != config.model_dump(
        mode="json"
    ):
        with recorded(["pretrain", "demo"]):
            build_mixture(config)
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
