"""Decision accuracy across proxy budgets: one table over every (proxy, token budget) cell run.

    python -m benchmarks.decision_budgets OUT [--earlier benchmarks/results/decision_accuracy.json]
        [--write benchmarks/results/decision_accuracy_budgets.json]

OUT is a `decision_accuracy` directory after one or more `sweep --proxies ... --budget-*` calls:
every finished proxy run under OUT/ablation-runs counts (a sweep still running leaves a partial
table, not nothing). Runs are grouped into cells `proxy@tokens`; in each cell every pair of recipes
that both have runs gets the paired effect and interval of trainer.gate_stats (documents + seeds,
90%), and the table says, for every two cells, how many pairs decide the same way (sign), and per
cell how many pairs are decided (interval clear of zero) and its seed noise. `--earlier` adds the
cells of an earlier summary (`decision_accuracy.json`: pair effects and intervals only).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from trainer.gate_stats import paired_effect

CONFIDENCE = 0.9
PARAMS = {"small": 610_000, "large": 2_560_000}  # total, as decision_accuracy.json records


def finished_runs(out: Path) -> list[dict[str, Any]]:
    runs = []
    for path in sorted((out / "ablation-runs").glob("*/result.json")):
        result = json.loads(path.read_text())
        if result.get("status") == "finished":
            runs.append(result)
    return runs


def cell_name(proxy: str, tokens: int) -> str:
    return f"{proxy}@{tokens}"


def _pair_key(a: str, b: str) -> tuple[tuple[str, str], float]:
    """Pairs in one order (alphabetical) and the sign that maps an (a, b) effect onto it."""
    return ((a, b), 1.0) if a < b else ((b, a), -1.0)


def measured_cells(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    grouped: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        grouped[cell_name(run["proxy"], run["token_budget"])][run["recipe_name"]].append(run)
    cells = {}
    for name, by_recipe in sorted(grouped.items()):
        proxy, tokens = name.split("@")
        recipes = {
            recipe: {
                "seeds": sorted(r["seed"] for r in rs),
                "bpb_mean": float(np.mean([r["metrics"]["bpb"] for r in rs])),
                "bpb_sd": float(np.std([r["metrics"]["bpb"] for r in rs], ddof=1))
                if len(rs) > 1
                else None,
                "wall_s_mean": float(np.mean([r.get("wall_s", 0.0) for r in rs])),
            }
            for recipe, rs in sorted(by_recipe.items())
        }
        pairs = {}
        for a, b in itertools.combinations(sorted(by_recipe), 2):
            effect = paired_effect(by_recipe[a], by_recipe[b], "bpb", CONFIDENCE)
            if effect is not None and len(effect.get("seeds", [])) >= 2:
                pairs[f"{a} vs {b}"] = {
                    k: effect[k] for k in ("effect", "lower", "upper", "se_documents", "se_seeds")
                }
        cells[name] = _cell(proxy, int(tokens), recipes, pairs, "measured here (per document)")
    return cells


def earlier_cells(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The two cells of a decision_accuracy.json (same proxies, one budget)."""
    tokens = int(summary["tokens_per_run"])
    cells = {}
    for proxy in ("small", "large"):
        pairs = {}
        for row in summary["pairs"]:
            (a, b), sign = _pair_key(row["a_name"], row["b_name"])
            e = row[proxy]
            low, high = sorted((sign * e["lower"], sign * e["upper"]))
            pairs[f"{a} vs {b}"] = {
                "effect": sign * e["effect"],
                "lower": low,
                "upper": high,
                "se_documents": e["se_documents"],
                "se_seeds": e["se_seeds"],
            }
        recipes = {
            name: {"bpb_mean": mean, "bpb_sd": sd}
            for name, mean, sd in summary.get("ranking", {}).get(proxy, [])
        }
        source = f"{summary['date']} summary ({summary['command']})"
        cells[cell_name(proxy, tokens)] = _cell(proxy, tokens, recipes, pairs, source)
    return cells


def _cell(proxy: str, tokens: int, recipes: dict, pairs: dict, source: str) -> dict[str, Any]:
    params = PARAMS.get(proxy)
    decided = [p for p in pairs.values() if p["lower"] > 0 or p["upper"] < 0]
    halves = [(p["upper"] - p["lower"]) / 2 for p in pairs.values()]
    sds = [r["bpb_sd"] for r in recipes.values() if r.get("bpb_sd") is not None]
    return {
        "proxy": proxy,
        "tokens": tokens,
        "params_total": params,
        "tokens_per_param": round(tokens / params, 3) if params else None,
        "compute_6nd": 6.0 * params * tokens if params else None,
        "source": source,
        "recipes": recipes,
        "pairs": pairs,
        "n_pairs": len(pairs),
        "n_decided": len(decided),
        "interval_half_width_median": float(np.median(halves)) if halves else None,
        "seed_sd_median": float(np.median(sds)) if sds else None,
    }


def agreement(cells: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """For every two cells: pairs both ran, how many agree in sign, and how many of those agree
    where both cells decided the pair."""
    rows = []
    for x, y in itertools.combinations(sorted(cells), 2):
        common = sorted(set(cells[x]["pairs"]) & set(cells[y]["pairs"]))
        if not common:
            continue
        px, py = cells[x]["pairs"], cells[y]["pairs"]
        same = [p for p in common if np.sign(px[p]["effect"]) == np.sign(py[p]["effect"])]
        flips = [p for p in common if p not in same]
        rows.append(
            {
                "cells": [x, y],
                "n_pairs": len(common),
                "n_agree": len(same),
                "flipped": flips,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--earlier", type=Path)
    parser.add_argument("--write", type=Path)
    args = parser.parse_args(argv)
    cells = measured_cells(finished_runs(args.out))
    if args.earlier:
        cells = {**earlier_cells(json.loads(args.earlier.read_text())), **cells}
    table = {"confidence": CONFIDENCE, "cells": cells, "agreement": agreement(cells)}
    text = json.dumps(table, indent=1)
    if args.write:
        args.write.write_text(text + "\n")
    for name, cell in sorted(cells.items(), key=lambda kv: kv[1]["compute_6nd"] or 0):
        print(
            f"{name:>15}  {cell['tokens_per_param']:>6} tok/param  "
            f"decided {cell['n_decided']}/{cell['n_pairs']}  "
            f"half-width {cell['interval_half_width_median']}  seed sd {cell['seed_sd_median']}"
        )
    for row in table["agreement"]:
        print(f"{' vs '.join(row['cells'])}: {row['n_agree']}/{row['n_pairs']} {row['flipped']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
