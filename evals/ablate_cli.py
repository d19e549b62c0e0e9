"""What `pretrain ablate CONFIG` prints: the report's headline, evidence, ranking and decision."""

from __future__ import annotations

from typing import Any


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
    if report["rank_agreement"]:
        print(f"rank agreement (Spearman): {report['rank_agreement'].get('spearman')}")
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
    from trainer.gate_rule import OUTLIER_RULE

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
    halving = report.get("halving")
    if halving:
        print(
            f"successive halving at {halving['fraction']:.0%} of the budget: best "
            f"{halving['best']}, {len(halving['dropped'])} recipe(s) stopped"
        )
        for row in halving["dropped"]:
            print(f"  - {row['recipe_name']}: behind by {row['behind_best_by']}")
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
