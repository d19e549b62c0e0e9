"""The ablation's decision: the best-ranked recipe, tested against the base with the paired
statistic of trainer/gate_stats.py, plus the constraints a team sets (no domain worse than X, the
smaller proxy agreeing with the larger). The report and the launch gate both call `decide`, so the
gate recomputes the verdict from the report's per-run results under its own criteria.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainer.gate_stats import describe, false_pass_rate, paired_effect, selection_confidence

LOWER_IS_BETTER_PREFIXES = ("bpb", "loss", "ppl", "perplexity", "nll")
CRITERIA_DEFAULTS: dict[str, Any] = {
    "metric": "bpb",
    "min_improvement": 0.0,
    "confidence": 0.95,
    "require_seed_spread": True,
    "max_domain_regression": None,
    "require_scale_agreement": False,
}


def domain_metrics(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """`bpb/<domain>/<lang>` of every eval set the runs were scored on."""
    return sorted(
        {m for run in runs for m in run["metrics"] if m.count("/") == 2 and m.startswith("bpb/")}
    )


def lower_is_better(metric: str) -> bool:
    """bpb / loss / perplexity fall as models improve; accuracies rise."""
    return metric.split("/")[0].lower().startswith(LOWER_IS_BETTER_PREFIXES)


def criteria_from(values: Mapping[str, Any]) -> dict[str, Any]:
    """The decision criteria (defaults filled in) from a config section (ablation or gate)."""
    criteria = dict(CRITERIA_DEFAULTS)
    criteria.update({k: v for k, v in values.items() if k in CRITERIA_DEFAULTS})
    for key in ("metric", "min_improvement", "confidence", "require_seed_spread"):
        if criteria[key] is None:
            criteria[key] = CRITERIA_DEFAULTS[key]
    criteria["lower_is_better"] = lower_is_better(criteria["metric"])
    criteria["false_pass_rate"] = false_pass_rate(float(criteria["confidence"]))
    return criteria


def _runs_of(runs: Sequence[Mapping[str, Any]], sha: str) -> list[Mapping[str, Any]]:
    return [run for run in runs if run["recipe_sha256"] == sha]


def _improvement_check(
    effect: dict[str, Any] | None, criteria: Mapping[str, Any]
) -> tuple[bool, str]:
    if effect is None:
        return False, "the two recipes share no seed with a result: nothing to compare"
    if effect["n_seeds"] < 2 and criteria["require_seed_spread"]:
        return False, (
            "one seed per recipe: the seed noise is unknown (run >= 2 seeds, or set "
            "require_seed_spread: false to accept a documents-only interval)"
        )
    bound, margin = effect["lower"], float(criteria["min_improvement"])
    passed = bound > margin
    return passed, (
        f"improvement {describe(effect)}: lower bound {bound:.4f} "
        f"{'>' if passed else '<='} min_improvement {margin} (equal recipes pass <= "
        f"{criteria['false_pass_rate']:.0%} of the time)"
    )


def _domain_checks(
    chosen: Sequence[Mapping[str, Any]],
    other: Sequence[Mapping[str, Any]],
    criteria: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Per eval set: chosen minus alternative bpb (positive: chosen worse), and the failures of
    `max_domain_regression` (its upper bound above the limit)."""
    limit = criteria.get("max_domain_regression")
    rows, failures = [], []
    for metric in domain_metrics(chosen):
        effect = paired_effect(chosen, other, metric, float(criteria["confidence"]))
        if effect is None:
            continue
        regression = {
            "domain": metric[4:],
            "regression": -effect["effect"],
            "upper": -effect["lower"],
            "lower": -effect["upper"],
            "n_documents": effect["n_documents"],
            "n_seeds": effect["n_seeds"],
        }
        rows.append(regression)
        if limit is not None and regression["upper"] > float(limit):
            failures.append(
                f"constraint max_domain_regression {limit} failed on {regression['domain']}: "
                f"chosen worse by {regression['regression']:.4f} bpb "
                f"({effect['confidence']:.0%} upper bound {regression['upper']:.4f})"
            )
    return rows, failures


def _scale_check(
    scale: Mapping[str, Any] | None, chosen: str, other: str, criteria: Mapping[str, Any]
) -> str | None:
    """A failure line when require_scale_agreement is set and the scales disagree (or are not
    both there)."""
    if not criteria.get("require_scale_agreement"):
        return None
    if not scale or not scale.get("pairs"):
        return "constraint require_scale_agreement failed: the sweep ran one proxy scale"
    pair = next((p for p in scale["pairs"] if {p["a"], p["b"]} == {chosen, other}), None)
    if pair is None:
        return "constraint require_scale_agreement failed: the pair did not run at both scales"
    if not pair["agree"]:
        return (
            f"constraint require_scale_agreement failed: {scale['proxies'][0]} decides "
            f"{pair['small_winner_name']}, {scale['proxies'][1]} decides {pair['large_winner_name']}"
        )
    return None


def decide(
    runs: Sequence[Mapping[str, Any]],
    ranking: Sequence[Mapping[str, Any]],
    base_sha: str,
    criteria: Mapping[str, Any],
    scale: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Choose the best-ranked recipe and test it against the base (the runner-up when the base
    itself is chosen, so keeping the base is a decision the evidence must support too).

    `runs` are the deciding proxy's runs (with per-document results where recorded); passed when
    the paired interval's lower bound clears min_improvement and every constraint holds.
    """
    criteria = criteria_from(criteria)
    chosen = ranking[0]
    base = next((row for row in ranking if row["recipe_sha256"] == base_sha), None)
    evidence = [
        f"{chosen['recipe_name']} ranks first on {criteria['metric']}: mean "
        f"{chosen['mean']:.4f} over {chosen['n_seeds']} seed(s)"
    ]
    result: dict[str, Any] = {
        "chosen": chosen,
        "base": base,
        "criteria": criteria,
        "passed": False,
        "improvement": None,
        "interval": None,
        "domains": [],
        "failed_constraints": [],
    }
    if base is None:
        return {**result, "evidence": evidence + ["the base recipe has no finished runs"]}
    other = base if chosen is not base else (ranking[1] if len(ranking) > 1 else None)
    evidence.append(f"base {base['recipe_name']}: mean {base['mean']:.4f}, rank {base['rank']}")
    if other is None:
        return {**result, "evidence": evidence + ["only the base recipe ran: nothing to compare"]}
    chosen_runs = _runs_of(runs, chosen["recipe_sha256"])
    other_runs = _runs_of(runs, other["recipe_sha256"])
    level = selection_confidence(float(criteria["confidence"]), len(ranking))
    effect = paired_effect(
        chosen_runs, other_runs, criteria["metric"], level, criteria["lower_is_better"]
    )
    passed, why = _improvement_check(effect, criteria)
    if chosen is base:
        why = f"base kept over runner-up {other['recipe_name']}: {why}"
    evidence.append(why)
    domains, failures = _domain_checks(chosen_runs, other_runs, criteria)
    scale_failure = _scale_check(scale, chosen["recipe_sha256"], other["recipe_sha256"], criteria)
    failures += [scale_failure] if scale_failure else []
    evidence += failures
    return {
        **result,
        "alternative": other,
        "passed": bool(passed and not failures),
        "improvement": effect["effect"] if effect else None,
        "interval": effect,
        "domains": domains,
        "failed_constraints": failures,
        "evidence": evidence,
    }
