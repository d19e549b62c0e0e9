"""`pretrain ablate CONFIG`: run the sweep (evals/sweep.py) and print its report.

Kept apart from evals/ablate.py (the config and recipe planning) so the sweep can import the
planning without a cycle.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evals.ablate import AblationConfig
from evals.sweep import run_sweep


def ablate_command(args: argparse.Namespace) -> int:
    from pretrain.cli_utils import resolve_config

    config = resolve_config(AblationConfig, args, _preflight)
    if config is None:
        return 0
    print_report(run_sweep(config)["report"], config.out)
    return 0


def _preflight(config: AblationConfig) -> str:
    """The sweep's own pre-work checks: mixture and train configs, eval sets, data, recipes."""
    from evals.sweep import make_specs
    from mixtures.build import check_tokenizer, verify_encoded
    from mixtures.recipe import MixtureConfig
    from pretrain.config import read_yaml

    specs, _ = make_specs(config)
    mixture = MixtureConfig.model_validate(read_yaml(config.mixture))
    check_tokenizer(mixture, verify_encoded(Path(mixture.build.encoded)))
    return f"{len(specs)} proxy runs planned; mixture, train template and eval sets verified"


def print_report(report: dict[str, Any], out: str) -> None:
    """The ranking, agreement, regression, decision and epoch flags, for the terminal."""
    metric = report["target_metric"]
    for proxy, rows in report["ranking"].items():
        print(f"{proxy}: {metric} mean ± std over seeds")
        for row in rows:
            std = f"{row['std']:.4f}" if row["std"] is not None else "n/a"
            print(
                f"  {row['rank']:>2}. {row['recipe_name']:<20} {row['mean']:.4f} ± {std} "
                f"({row['n_seeds']} seeds)"
            )
    if report["rank_agreement"]:
        print(f"rank agreement (Spearman): {report['rank_agreement'].get('spearman')}")
    regression = report["regression"]
    if regression.get("status") == "fitted":
        best = regression["predicted_best"]
        fit = regression["models"][regression["selected_model"]]
        print(
            f"regression ({regression['selected_model']}, CV R2 {fit['cv_r2']}): predicted best "
            f"{best['predicted']:.4f} at "
            + ", ".join(f"{k} {v:.3f}" for k, v in best["weights"].items())
        )
    flags = report["epoch_flags"]
    verdict = "PASSED" if report["passed"] else "NOT PASSED"
    print(
        f"chosen recipe: {report['chosen_recipe_name']} ({report['chosen_recipe_sha256'][:12]})"
        f"; criteria {verdict}"
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
