"""What a single ranking hides: per-domain bpb of every recipe with intervals and the Pareto front
over domains, and whether the small proxy's pairwise decisions agree with the large proxy's
(decision accuracy, DataDecide-style), with each scale's seed noise.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trainer.gate_rule import domain_metrics
from trainer.gate_stats import paired_effect, recipe_interval


def _grouped(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[Mapping[str, Any]]]]:
    """proxy -> recipe hash -> runs."""
    grouped: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        grouped[run["proxy"]][run["recipe_sha256"]].append(run)
    return grouped


def domain_table(
    runs: Sequence[Mapping[str, Any]], confidence: float = 0.9
) -> dict[str, list[dict[str, Any]]]:
    """Per proxy, per recipe: bpb per domain (mean over seeds) with its interval, overall bpb,
    and whether the recipe is on the Pareto front over the domains (no other recipe is at least as
    good on every domain and better on one)."""
    metrics = domain_metrics(runs)
    table: dict[str, list[dict[str, Any]]] = {}
    for proxy, by_recipe in sorted(_grouped(runs).items()):
        rows = []
        for sha, recipe_runs in sorted(by_recipe.items()):
            domains = {}
            for metric in metrics:
                interval = recipe_interval(recipe_runs, metric, confidence)
                if interval is not None:
                    domains[metric[4:]] = {
                        k: interval[k] for k in ("effect", "lower", "upper", "n_documents")
                    }
            rows.append(
                {
                    "recipe_sha256": sha,
                    "recipe_name": recipe_runs[0].get("recipe_name", sha[:8]),
                    "n_seeds": len(recipe_runs),
                    "domains": domains,
                }
            )
        front = pareto_front([{k: v["effect"] for k, v in r["domains"].items()} for r in rows])
        for index, row in enumerate(rows):
            row["pareto"] = index in front
        table[proxy] = rows
    return table


def pareto_front(points: Sequence[Mapping[str, float]]) -> set[int]:
    """Indices of the points no other point dominates (lower is better on every key)."""
    keys = sorted(set.intersection(*(set(p) for p in points))) if points else []
    if not keys:
        return set(range(len(points)))
    values = np.array([[p[k] for k in keys] for p in points])
    # dominates[j, i]: point j is at least as good as point i on every key, better on one
    at_least = np.all(values[:, None] <= values[None], axis=-1)
    dominates = at_least & np.any(values[:, None] < values[None], axis=-1)
    return set(np.flatnonzero(~dominates.any(axis=0)).tolist())


def _noise(by_recipe: Mapping[str, Sequence[Mapping[str, Any]]], metric: str) -> dict[str, Any]:
    sds = [
        float(np.std([r["metrics"][metric] for r in runs], ddof=1))
        for runs in by_recipe.values()
        if len(runs) > 1
    ]
    return {
        "seed_sd_median": float(np.median(sds)) if sds else None,
        "seed_sd_max": float(max(sds)) if sds else None,
        "recipes": len(by_recipe),
    }


def _winner(effect: Mapping[str, Any] | None, a: str, b: str) -> str | None:
    if effect is None or effect["effect"] == 0:
        return None
    return a if effect["effect"] > 0 else b


def _inside(effect: Mapping[str, Any] | None) -> bool:
    return effect is None or effect["lower"] <= 0.0 <= effect["upper"]


def _pair(
    small: Mapping[str, Sequence], large: Mapping[str, Sequence], a: str, b: str, opts: dict
) -> dict[str, Any]:
    names = {a: small[a][0].get("recipe_name", a[:8]), b: small[b][0].get("recipe_name", b[:8])}
    at_small = paired_effect(small[a], small[b], **opts)
    at_large = paired_effect(large[a], large[b], **opts)
    small_winner, large_winner = _winner(at_small, a, b), _winner(at_large, a, b)
    row = {
        "a": a,
        "b": b,
        "a_name": names[a],
        "b_name": names[b],
        "small_effect": at_small,
        "large_effect": at_large,
        "small_winner_name": names.get(small_winner, "tie"),
        "large_winner_name": names.get(large_winner, "tie"),
        "agree": small_winner is not None and small_winner == large_winner,
        "small_inside_noise": _inside(at_small),
        "large_inside_noise": _inside(at_large),
    }
    row["flags"] = [
        *(["small-scale margin inside the noise"] if row["small_inside_noise"] else []),
        *(["rank flips between scales"] if not row["agree"] else []),
    ]
    return row


def scale_agreement(
    runs: Sequence[Mapping[str, Any]],
    proxies: Sequence[str],
    metric: str,
    confidence: float = 0.9,
    lower_is_better: bool = True,
) -> dict[str, Any] | None:
    """For every pair of recipes run at both scales: the decision at the small proxy and at the
    large one, whether they agree, and flags (small margin inside its interval, rank flip).
    `proxies` is (small, large). None with fewer than two proxies."""
    if len(proxies) < 2:
        return None
    grouped = _grouped(runs)
    small, large = grouped[proxies[0]], grouped[proxies[1]]
    common = sorted(set(small) & set(large))
    opts = {"metric": metric, "confidence": confidence, "lower_is_better": lower_is_better}
    pairs = [_pair(small, large, a, b, opts) for a, b in itertools.combinations(common, 2)]
    decided = [p for p in pairs if not p["large_inside_noise"]]
    result = {
        "proxies": list(proxies[:2]),
        "metric": metric,
        "confidence": confidence,
        "pairs": pairs,
        "n_pairs": len(pairs),
        "accuracy": float(np.mean([p["agree"] for p in pairs])) if pairs else None,
        "accuracy_where_large_decided": (
            float(np.mean([p["agree"] for p in decided])) if decided else None
        ),
        "n_large_decided": len(decided),
        "n_small_inside_noise": sum(p["small_inside_noise"] for p in pairs),
        "noise": {proxy: _noise(grouped[proxy], metric) for proxy in proxies[:2]},
    }
    return result
