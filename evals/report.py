"""The ablation report: ranking over seeds, decision agreement between proxy sizes, a RegMix regression from
weights to the metric, the decision, and the `ablation` artifact. Runs are bound to recipes by hash;
the analysis is plain numpy/scipy/scikit-learn, so tests reach it without training.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evals.tradeoffs import domain_table, scale_agreement
from pretrain.artifacts import ablation as ablation_artifact
from pretrain.artifacts.base import write_artifact
from pretrain.errors import PretrainError
from pretrain.storage import write_json
from trainer.gate_rule import OUTLIER_RULE, criteria_from, decide, lower_is_better, split_health
from trainer.gate_stats import pct


def summarize(runs: Sequence[Mapping[str, Any]], metric: str) -> dict[str, list[dict[str, Any]]]:
    """Per proxy: recipes ranked by the mean of `metric` over seeds (best first), with spread."""
    grouped: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    names: dict[str, str] = {}
    for run in sorted(runs, key=lambda run: int(run["seed"])):  # the same sums in any run order
        value = run["metrics"].get(metric)
        if value is None or not math.isfinite(float(value)):
            continue
        grouped[run["proxy"]][run["recipe_sha256"]].append(float(value))
        names[run["recipe_sha256"]] = run.get("recipe_name", run["recipe_sha256"][:8])
    sign = 1.0 if lower_is_better(metric) else -1.0
    ranking: dict[str, list[dict[str, Any]]] = {}
    for proxy, by_recipe in sorted(grouped.items()):
        rows = [
            {
                "recipe_sha256": sha,
                "recipe_name": names[sha],
                "mean": float(np.mean(vals)),
                "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else None,  # 1 seed: unknown
                "min": float(min(vals)),
                "max": float(max(vals)),
                "n_seeds": len(vals),
            }
            for sha, vals in by_recipe.items()
        ]
        # Deterministic: ties broken by recipe hash.
        rows.sort(key=lambda row: (sign * row["mean"], row["recipe_sha256"]))
        for rank, row in enumerate(rows, start=1):
            row["rank"] = rank
        ranking[proxy] = rows
    return ranking


def primary_proxy(proxies: Iterable[str], sizes: Mapping[str, float] | None) -> str:
    """The proxy whose results decide: the largest by parameter count when known, then by name."""
    return max(proxies, key=lambda p: ((sizes or {}).get(p, 0.0), p))


def _cv_scores(model: Any, x: np.ndarray, y: np.ndarray, folds: int) -> dict[str, float]:
    from scipy.stats import spearmanr
    from sklearn.model_selection import KFold, cross_val_predict

    predicted = cross_val_predict(model, x, y, cv=KFold(folds, shuffle=True, random_state=0))
    residual = y - predicted
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    rho = float(spearmanr(predicted, y).statistic) if np.ptp(predicted) > 0 else None
    return {
        "cv_r2": 1.0 - float(np.sum(residual**2)) / ss_tot if ss_tot > 0 else None,
        "cv_mae": float(np.mean(np.abs(residual))),
        "cv_spearman": rho,
        "folds": folds,
    }


CANDIDATES = 20000
CONCENTRATION = 20.0
"""Dirichlet concentration around the base weights: candidates stay near the base recipe."""


def _predict_best(
    model: Any,
    observed: np.ndarray,
    components: Sequence[str],
    metric: str,
    base_weights: Mapping[str, float],
) -> dict[str, Any]:
    """The best predicted of CANDIDATES Dirichlet samples around the base (and the observed)."""
    rng = np.random.default_rng(0)
    alpha = np.array([max(base_weights.get(c, 0.0), 1e-3) for c in components]) * CONCENTRATION
    pool = np.vstack([rng.dirichlet(alpha, size=CANDIDATES), observed])
    predicted = model.predict(pool)
    index = int(np.argmin(predicted) if lower_is_better(metric) else np.argmax(predicted))
    return {
        "weights": dict(zip(components, map(float, pool[index]))),
        "predicted": float(predicted[index]),
        "observed": index >= CANDIDATES,
    }


def fit_regression(
    runs: Sequence[Mapping[str, Any]],
    components: Sequence[str],
    metric: str,
    base_weights: Mapping[str, float],
) -> dict[str, Any]:
    """RegMix-style: fit weights -> metric (linear and a tree ensemble), cross-validated, then
    predict the best of CANDIDATES Dirichlet samples around the base weights."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import Ridge

    usable = [r for r in runs if r["metrics"].get(metric) is not None]
    x = np.array([[float(r["weights"].get(c, 0.0)) for c in components] for r in usable])
    y = np.array([float(r["metrics"][metric]) for r in usable])
    distinct = len({tuple(row) for row in x.round(6)})
    result: dict[str, Any] = {
        "metric": metric,
        "components": list(components),
        "points": len(usable),
        "distinct_recipes": distinct,
    }
    if distinct < 4 or len(usable) < 5:
        result["status"] = (
            f"only {distinct} distinct recipe(s) / {len(usable)} run(s): too few "
            "to fit and cross-validate a regression (need >= 4 recipes, 5 runs)"
        )
        return result
    folds = min(5, len(usable))
    models = {
        "linear": Ridge(alpha=1e-3),
        "tree": RandomForestRegressor(n_estimators=48, random_state=0),
    }
    fits: dict[str, Any] = {}
    for name, model in models.items():
        fits[name] = _cv_scores(model, x, y, folds)
        model.fit(x, y)
        if name == "linear":
            fits[name]["coefficients"] = dict(zip(components, map(float, model.coef_)))
    r2 = {name: fits[name]["cv_r2"] for name in fits}
    best_model = max(r2, key=lambda n: (-math.inf if r2[n] is None else r2[n], n))
    result.update(
        {
            "status": "fitted",
            "models": fits,
            "selected_model": best_model,
            "predicted_best": _predict_best(
                models[best_model], x, components, metric, base_weights
            ),
            "in_sample_predictions": [float(v) for v in models[best_model].predict(x)],
        }
    )
    return result


def epoch_table(
    components: Sequence[Mapping[str, Any]], full_tokens: int | None, proxy_tokens: int
) -> list[dict[str, Any]]:
    """Epochs per component for the full run and the proxy; flag where the full run repeats data
    the proxy sees less than once (small proxies mis-rank mixtures that repeat data)."""
    rows = []
    for comp in components:
        available = comp.get("available_tokens") or 0
        weight = float(comp.get("weight", 0.0))
        proxy = proxy_tokens * weight / available if available else None
        full = full_tokens * weight / available if available and full_tokens else None
        row: dict[str, Any] = {
            "component": comp["name"],
            "weight": weight,
            "available_tokens": available,
            "proxy_epochs": proxy,
            "full_epochs": full,
        }
        if full is None or full <= 1.0:
            row.update(matched=True, flag=None)
        else:
            row.update(
                proxy_subset_tokens=int(proxy_tokens * weight / full),
                matched=False,
                flag=f"full run repeats {comp['name']} {full:.2f}x; the proxy sees it "
                f"{proxy:.3f}x and cannot subsample it to match",
            )
        rows.append(row)
    return rows


MIN_SET_DOCUMENTS = 50
"""An eval set with fewer documents is warned about with its interval: 10 documents gave a
+-0.45 bpb interval, wider than any recipe effect a proxy sweep measures."""


def small_set_warnings(
    table: Mapping[str, Sequence[Mapping[str, Any]]], primary: str, confidence: float
) -> list[str]:
    """One line per eval set under MIN_SET_DOCUMENTS documents, with its widest interval."""
    widest: dict[str, tuple[int, float]] = {}
    for row in table.get(primary, []):
        for name, cell in row["domains"].items():
            half = (cell["upper"] - cell["lower"]) / 2
            if cell["n_documents"] and cell["n_documents"] < MIN_SET_DOCUMENTS:
                widest[name] = (cell["n_documents"], max(half, widest.get(name, (0, 0.0))[1]))
    return [
        f"eval set {name}: {count} documents (< {MIN_SET_DOCUMENTS}): its bpb is known to "
        f"+-{half:.3f} ({pct(confidence)} two-sided interval); differences smaller than that "
        "on it are noise: add eval documents"
        for name, (count, half) in sorted(widest.items())
    ]


def headline(report: Mapping[str, Any]) -> str:
    """The report's top line: what was decided, on which pairs, which runs were left out, why."""
    decision = report["decision"]
    verdict = "PASSED" if report["passed"] else "NOT PASSED"
    pairs = ", ".join(
        f"{c['pair']} {'ok' if c['passed'] else 'FAILED'}" for c in decision.get("comparisons", [])
    )
    left_out = [f"{u['run']} ({u['problems'][0]})" for u in report.get("unhealthy_runs", [])]
    text = f"decision: {decision['verdict']} -> {verdict}"
    text += f"; pairs: {pairs}" if pairs else ""
    text += f"; left out (unhealthy): {', '.join(left_out)}" if left_out else ""
    return text


def build_report(
    runs: Sequence[Mapping[str, Any]],
    *,
    base_sha: str,
    identity: Mapping[str, Any],
    criteria: Mapping[str, Any] | None = None,
    proxy_sizes: Mapping[str, float] | None = None,
    recipes: Mapping[str, Mapping[str, Any]] | None = None,
    epochs: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Everything report.json holds (CONTRACTS.md, kind `ablation`)."""
    criteria = criteria_from(criteria or {})
    metric = criteria["metric"]
    every_run, (runs, unhealthy) = runs, split_health(runs, criteria)
    if not runs:
        first = unhealthy[0] if unhealthy else {"run": "none", "problems": ["no runs"]}
        raise PretrainError(
            f"no healthy proxy run to report on: all {len(unhealthy)} are unhealthy (first: "
            f"{first['run']}: {first['problems'][0]}); fix that and run the sweep again"
        )
    ranking = summarize(runs, metric)
    primary = primary_proxy({run["proxy"] for run in runs}, proxy_sizes)
    by_size = sorted(ranking, key=lambda p: ((proxy_sizes or {}).get(p, 0.0), p))
    scale = scale_agreement(
        runs, by_size, metric, float(criteria["confidence"]), lower_is_better(metric)
    )
    primary_runs = [r for r in runs if r["proxy"] == primary]
    decision = decide(every_run, ranking[primary], base_sha, criteria, scale, primary)
    domains = domain_table(runs, float(criteria["confidence"]))
    components = sorted({c for run in runs for c in run["weights"]})
    base_weights = (
        next(r["weights"] for r in runs if r["recipe_sha256"] == base_sha)
        if any(r["recipe_sha256"] == base_sha for r in runs)
        else {}
    )
    metrics = sorted({m for run in runs for m in run["metrics"]})
    report = {
        "report_version": 2,
        **dict(identity),
        "target_metric": metric,
        "primary_proxy": primary,
        "base_recipe_sha256": base_sha,
        "chosen_recipe_sha256": decision["chosen"]["recipe_sha256"],
        "chosen_recipe_name": decision["chosen"]["recipe_name"],
        "criteria": decision["criteria"],
        "passed": decision["passed"],
        "verdict": decision["verdict"],
        "decision": decision,
        "unhealthy_runs": unhealthy,
        "outliers": decision["outliers"],
        "warnings": small_set_warnings(domains, primary, float(criteria["confidence"])),
        "ranking": ranking,
        "summary": {m: summarize(runs, m) for m in metrics},
        "domains": domains,
        "scale_agreement": scale,
        "regression": fit_regression(primary_runs, components, metric, base_weights),
        "epochs": list(epochs),
        "epoch_flags": [row["flag"] for row in epochs if row.get("flag")],
        "recipes": {k: dict(v) for k, v in (recipes or {}).items()},
        "runs": [dict(run) for run in every_run],
    }
    return {"headline": headline(report), **report}


def _print_ranking(report: dict[str, Any]) -> None:
    """Per proxy: overall metric over seeds, then bpb per domain (± interval half-width);
    * marks the Pareto front over domains."""
    metric = report["target_metric"]
    domains = report.get("domains") or {}
    for proxy, rows in report["ranking"].items():
        table = {row["recipe_sha256"]: row for row in domains.get(proxy, [])}
        names = sorted({d for row in table.values() for d in row["domains"]})
        print(f"{proxy}: {metric} mean ± std over seeds | bpb per domain ± interval (* Pareto)")
        if names:
            print(f"  {'':<25} {'':<24} " + " ".join(f"{n:>15}" for n in names))
        for row in rows:
            std = f"{row['std']:.4f}" if row["std"] is not None else "n/a"
            entry = table.get(row["recipe_sha256"], {"domains": {}, "pareto": False})
            cells = []
            for name in names:
                cell = entry["domains"].get(name)
                half = (cell["upper"] - cell["lower"]) / 2 if cell else 0.0
                cells.append(f"{cell['effect']:>8.4f}±{half:.3f}" if cell else f"{'-':>15}")
            mark = "*" if entry["pareto"] else " "
            print(
                f"  {row['rank']:>2}.{mark}{row['recipe_name']:<20} {row['mean']:.4f} ± {std} "
                f"({row['n_seeds']} seeds) " + " ".join(cells)
            )


def _print_scales(report: dict[str, Any]) -> None:
    scale = report.get("scale_agreement")
    if not scale or not scale["pairs"]:
        return
    small, large = scale["proxies"]
    accuracy = scale["accuracy"]
    print(
        f"decision accuracy {small} -> {large}: {accuracy:.0%} of {scale['n_pairs']} pairs agree; "
        f"{scale['n_small_inside_noise']} small-scale margin(s) inside the noise; seed sd "
        + ", ".join(
            f"{p} {n['seed_sd_median']:.4f}" if n["seed_sd_median"] is not None else f"{p} n/a"
            for p, n in scale["noise"].items()
        )
    )
    for pair in scale["pairs"]:
        if pair["flags"]:
            print(
                f"  ! {pair['a_name']} vs {pair['b_name']}: {small} picks "
                f"{pair['small_winner_name']}, {large} picks {pair['large_winner_name']} "
                f"({'; '.join(pair['flags'])})"
            )


def _print_regression(report: dict[str, Any]) -> None:
    regression = report["regression"]
    if regression.get("status") != "fitted":
        return
    best = regression["predicted_best"]
    fit = regression["models"][regression["selected_model"]]
    print(
        f"regression ({regression['selected_model']}, CV R2 {fit['cv_r2']}): predicted best "
        f"{best['predicted']:.4f} at "
        + ", ".join(f"{k} {v:.3f}" for k, v in best["weights"].items())
    )
    for row in report.get("predictions") or []:
        measured = "not run" if row.get("measured") is None else f"{row['measured']:.4f}"
        print(f"  predicted {row['predicted']:.4f}, measured {measured} ({row['recipe_name']})")


def _print_evidence_flags(report: dict[str, Any]) -> None:
    """Unhealthy runs, seed outliers (with the rule) and small eval sets, each on its line."""
    for row in report.get("unhealthy_runs", []):
        print(
            f"  ! unhealthy, left out: {row['run']}: {'; '.join(row['problems'])} "
            f"(ended: {row['ended']}, rollbacks {row['rollbacks']}, skipped batches "
            f"{row['skipped_batches']})"
        )
    for row in report.get("outliers", []):
        print(
            f"  ! seed outlier: {row['run']}: {row['value']:.4f} against its recipe's median "
            f"{row['recipe_median']:.4f} (modified z {row['modified_z']}; rule: {OUTLIER_RULE})"
        )
    for line in report.get("warnings", []):
        print(f"  ! {line}")


def print_report(report: dict[str, Any], out: str) -> None:
    """The decision's top line, then the ranking, trade-offs, agreement, regression, the
    decision's evidence and epoch flags."""
    print(report["headline"])
    _print_evidence_flags(report)
    _print_ranking(report)
    _print_scales(report)
    _print_regression(report)
    flags = report["epoch_flags"]
    verdict = "PASSED" if report["passed"] else "NOT PASSED"
    print(
        f"chosen recipe: {report['chosen_recipe_name']} ({report['chosen_recipe_sha256'][:12]})"
        f"; {report['decision']['verdict']}; criteria {verdict}"
    )
    for line in report["decision"]["evidence"]:
        print(f"  - {line}")
    for flag in flags[:5]:
        print(f"  ! {flag}")
    if len(flags) > 5:
        print(f"  ! ... {len(flags) - 5} more epoch flags in report.json")
    print(
        f"-> {out} (report.json, ranking.png; chosen_mixture.yaml rebuilds the chosen "
        "recipe for the full run)"
    )


def write_report(
    out_dir: str | Path,
    report: Mapping[str, Any],
    *,
    config: Mapping[str, Any] | None = None,
    inputs: Sequence[str | Path] = (),
) -> dict[str, Any]:
    """Write report.json and the plots, then the `ablation` manifest (last)."""
    from evals.plots import plot_ablation

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "report.json", report)
    plot_ablation(report, out)
    return write_artifact(
        out,
        ablation_artifact.fields_of(report),
        config=config,
        inputs=inputs,
        counts={
            "runs": len(report["runs"]),
            "recipes": len({r["recipe_sha256"] for r in report["runs"]}),
        },
    )
