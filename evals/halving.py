"""Successive halving for a sweep (`halving.fraction`): every recipe first trains at a fraction of
the token budget; a recipe the rung's best beats with confidence (the paired interval of
trainer/gate_stats.py lies above zero) is clearly behind and stops there; the rest (and always
the base) train at the full budget. The rung's runs are cached like any other (their budget is
part of their key) and recorded in the report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evals.ablate import AblationConfig, HalvingConfig
from evals.report import summarize
from trainer.gate_rule import lower_is_better, split_health
from trainer.gate_stats import describe, paired_effect


def rung_config(config: AblationConfig, halving: HalvingConfig) -> AblationConfig:
    """The sweep at `fraction` of every proxy's token budget."""

    def cut(tokens: int) -> int:
        return max(1, int(tokens * halving.fraction))

    proxies = [
        p.model_copy(update={"token_budget": cut(p.token_budget)}) if p.token_budget else p
        for p in config.proxies
    ]
    return config.model_copy(
        update={"token_budget": cut(config.token_budget), "proxies": proxies, "halving": None}
    )


def clearly_behind(
    runs: Sequence[Mapping[str, Any]], base_sha: str, metric: str, confidence: float
) -> tuple[set[str], dict[str, Any]]:
    """Recipe hashes the rung's best beats with confidence, and what the report records."""
    healthy = split_health([run for run in runs if run["status"] == "finished"], {})[0]
    ranked = next(iter(summarize(healthy, metric).values()), [])  # one proxy: the deciding one
    if not ranked:
        return set(), {"best": None, "dropped": []}
    best = ranked[0]["recipe_sha256"]
    by_recipe: dict[str, list[Mapping[str, Any]]] = {}
    for run in healthy:  # an unhealthy run decides nothing
        if metric in run["metrics"]:
            by_recipe.setdefault(run["recipe_sha256"], []).append(run)
    dropped, rows = set(), []
    for sha, recipe_runs in sorted(by_recipe.items()):
        if sha in (best, base_sha):
            continue
        effect = paired_effect(
            by_recipe[best], recipe_runs, metric, confidence, lower_is_better(metric)
        )
        if effect is not None and effect["lower"] > 0:
            dropped.add(sha)
            rows.append(
                {
                    "recipe_name": recipe_runs[0]["recipe_name"],
                    "recipe_sha256": sha,
                    "behind_best_by": describe(effect),
                }
            )
    return dropped, {"best": by_recipe[best][0]["recipe_name"], "dropped": rows}
